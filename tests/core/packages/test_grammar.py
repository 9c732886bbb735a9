"""The grammar every package field a host tool reads is held to: what passes and what is refused."""

from __future__ import annotations

import pytest

from wasm_runner.packages.grammar import (
    checked_filename,
    checked_name,
    checked_pin_fields,
    checked_requirement,
    checked_url,
    checked_version,
    pinned_requirement,
)
from wasm_runner.packages.wheels import WheelRefused

SHA = "ab" * 32


@pytest.mark.parametrize("name", ["requests", "zope.interface", "typing_extensions", "A1", "x"])
def test_pep_508_names_pass(name):
    assert checked_name(name) == name


@pytest.mark.parametrize("name", ["", "-e", "a\n-e /x", "a b", "a/../b", "/etc/passwd", ".hidden", "a-", "a" * 201,
                                  "tinydep==2.0", "ä", None, 3])
def test_other_names_are_refused(name):
    with pytest.raises(WheelRefused) as refused:
        checked_name(name)
    assert refused.value.kind == "invalid_request" and "\n" not in refused.value.message


@pytest.mark.parametrize("version", ["1.0", "2.0.post1", "1!2.0rc1", "1.0+local.7", "1.0.dev3"])
def test_pep_440_versions_pass(version):
    assert checked_version(version) == version


@pytest.mark.parametrize("version", ["", " 1.0", "1.0\n", "2.0\n-e /x", "2.0\n-r /data/presign.secret", "1.0 ; x",
                                     "not-a-version", "1.0/../x", "1" * 129])
def test_other_versions_are_refused(version):
    with pytest.raises(WheelRefused) as refused:
        checked_version(version)
    assert refused.value.kind == "invalid_request"


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://h/x.whl", "http://", "/files/a.whl", "http://h/a b.whl",
                                 "http://h/a.whl\n-e /x", "http://h:99999/a.whl", "http://h\\@evil/a.whl", ""])
def test_urls_other_than_http_s_with_a_host_are_refused(url):
    with pytest.raises(WheelRefused):
        checked_url(url)
    assert checked_url("https://files.example/p/a-1.0-py3-none-any.whl#sha256=" + SHA)


def test_a_filename_must_name_the_pins_distribution_and_version():
    assert checked_filename("zope.interface-7.0-py3-none-any.whl", "zope-interface", "7.0")
    for filename, name, version in (("tinydep-2.0-py3-none-any.whl", "tinydep", "2.1"),
                                    ("tinydep-2.0-py3-none-any.whl", "tinyapp", "2.0"),
                                    ("../tinydep-2.0-py3-none-any.whl", "tinydep", "2.0"),
                                    ("tinydep-2.0-py3-none-any.whl\n-e", "tinydep", "2.0")):
        with pytest.raises(WheelRefused):
            checked_filename(filename, name, version)


def test_a_pin_is_checked_field_by_field():
    good = ("tinydep", "2.0", "tinydep-2.0-py3-none-any.whl", "http://127.0.0.1:1/files/t.whl", SHA, 10)
    checked_pin_fields(*good)
    for position, bad in ((4, "AB" * 32), (4, SHA + "\n"), (5, -1), (5, True), (3, "file:///data/x.whl")):
        fields = list(good)
        fields[position] = bad
        with pytest.raises(WheelRefused):
            checked_pin_fields(*fields)


@pytest.mark.parametrize("text", ["requests==2.32.3", "pyyaml>=6", "a[b,c]~=1.0", 'x; python_version >= "3.8"'])
def test_requirements_by_name_pass(text):
    assert checked_requirement(text).name


@pytest.mark.parametrize("text", ["-e /srv/tenant", "-r /data/presign.secret", "-c x", "--find-links=http://h/", "--",
                                  "./project", "/abs/project", "~/project", "x\n-e /y", "x\r-e /y", "x @ file:///y",
                                  "x @ https://h/x.whl", "x\\y", ""])
def test_options_paths_urls_and_control_characters_are_refused(text):
    with pytest.raises(WheelRefused) as refused:
        checked_requirement(text)
    assert refused.value.kind in ("invalid_request", "index_not_allowed", "not_found")


def test_a_pinned_requirement_is_made_from_checked_fields_only():
    assert pinned_requirement("Zope.Interface", "7.0") == "zope-interface==7.0"
    with pytest.raises(WheelRefused):
        pinned_requirement("tinydep", "2.0\n-e /x")
