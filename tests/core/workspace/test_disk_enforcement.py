"""Which kernel disk quotas a directory's filesystem offers (reported by `wasm-runner doctor`)."""

from __future__ import annotations

from pathlib import Path

from wasm_runner.workspace.disk_enforcement import disk_enforcement

MOUNTINFO = """\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard
30 22 254:1 / /srv/quota rw,relatime shared:2 - ext4 /dev/vdb rw,prjquota
31 22 254:2 / /srv/xfs rw,relatime shared:3 - xfs /dev/vdc rw,attr2,inode64,pquota
32 22 0:30 / /srv/tmp rw,nosuid shared:4 - tmpfs tmpfs rw,size=65536k
"""


def test_project_quotas_and_size_limited_filesystems_are_told_apart(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(MOUNTINFO)
    plain = disk_enforcement("/var/lib/wasm-runner", info)
    assert (plain.fs_type, plain.mount_point, plain.kernel) == ("ext4", "/", None)
    assert "without project quotas" in plain.detail
    assert disk_enforcement("/srv/quota/data/sessions", info).kernel == "project-quota"
    assert disk_enforcement("/srv/xfs", info).kernel == "project-quota"
    assert disk_enforcement("/srv/tmp/x", info).kernel == "size-limited-fs"
    assert disk_enforcement("/srv/quotaX", info).mount_point == "/"  # a prefix of the name is not a parent


def test_this_machine_is_reported(tmp_path):
    report = disk_enforcement(tmp_path)
    assert report.fs_type is not None and report.mount_point is not None and report.detail
    assert Path(report.mount_point) == tmp_path or Path(report.mount_point) in tmp_path.resolve().parents
