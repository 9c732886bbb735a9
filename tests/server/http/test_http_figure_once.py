"""A matplotlib figure comes back once in an HTTP result, however the code shows and saves it."""

from __future__ import annotations

import pytest
from server_helpers import new_session, run

from wasm_runner.providers.native.bwrap import find_bwrap
from wasm_runner.providers.native.toolchain import find_python_data

pytestmark = pytest.mark.skipif(find_bwrap() is None or find_python_data() is None,
                                reason="needs bubblewrap and the python-data environment (wasm-runner prepare)")

PLOT = "import matplotlib.pyplot as plt\nfig, ax = plt.subplots(); ax.plot([1, 4, 2])\n"


@pytest.mark.parametrize("code, saved", [
    (PLOT + "display(fig)", []),  # displayed, then still open at the end of the cell
    (PLOT + "fig.savefig('chart.png')\ndisplay(fig)", ["chart.png"]),
    (PLOT + "display(fig)\nfig.savefig('chart.png')", ["chart.png"]),
    (PLOT + "plt.show()\nfig.savefig('chart.png')", ["chart.png"]),
], ids=["display", "save-display", "display-save", "show-save"])
async def test_a_figure_shown_and_saved_comes_back_once(client, code, saved):
    sid = await new_session(client, profile="python-data")
    result = await run(client, sid, code, limits={"timeout_s": 60})
    assert result["error"] is None, result["stderr"]
    assert [o["type"] for o in result["outputs"]] == ["image/png"]
    assert result.get("files", {}).get("created", []) == saved


async def test_a_figure_saved_and_then_shown_comes_back_as_its_file_only(client):
    sid = await new_session(client, profile="python-data")
    result = await run(client, sid, PLOT + "fig.savefig('chart.png')\nplt.show()", limits={"timeout_s": 60})
    assert result["error"] is None, result["stderr"]
    assert result["outputs"] == [] and result.get("files", {}).get("created", []) == ["chart.png"]
