"""Writing the report folder: ``index.html``, ``assets/`` (the page's CSS and JavaScript) and ``data/`` (the
overview in ``run.js``, the sample pages in ``pages/<id>.js``).

The data files are JavaScript that registers its object (``window.GROVE_DATA.push({...})``), loaded with
``<script src>``: a page opened from disk (``file://``) may not ``fetch()`` files beside it, but it may run
scripts. The folder is marked as a report (``.grove-view``); writing again replaces a marked folder's report and
refuses a folder that holds anything else. Every bidirectional control character in the data and the title is
written as a visible ``[U+XXXX]`` (:mod:`grove.view.shared_text`)."""

from __future__ import annotations

import html
import json
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

from grove.view.sample_pages import Page
from grove.view.shared_text import visible_controls

MARKER = ".grove-view"
TEMPLATE = "report.html"
SCRIPT_ORDER = ("dom.js", "data_loader.js")  # loaded first (helpers); main.js last (it starts the page); others A-Z


class ReportFolderError(ValueError):
    """The output folder cannot take the report (it holds other files)."""


def data_script(payload: Any) -> str:
    """``payload`` as a script that registers it; the JSON is escaped so that no ``</script>`` or line separator in
    a sample's text can end the script early, and every bidirectional control in a string (a key or a value: only
    strings hold them) is made visible, so that no text is shown in another order than it was written."""
    text = visible_controls(json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":")))
    text = text.replace("</", "<\\/").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return f"window.GROVE_DATA = window.GROVE_DATA || [];\nwindow.GROVE_DATA.push({text});\n"


def script_json(script: str) -> Any:
    """The object a data script registers (the inverse of :func:`data_script`, for tests and tools)."""
    start = script.index("window.GROVE_DATA.push(") + len("window.GROVE_DATA.push(")
    return json.loads(script[start : script.rindex(");")])


def asset_files() -> list[Any]:
    """The page's own files (package data under ``grove/view/assets``)."""
    folder = resources.files("grove.view").joinpath("assets")
    return sorted((f for f in folder.iterdir() if f.name.endswith((".js", ".css", ".html"))), key=lambda f: f.name)


def _load_order(name: str) -> tuple[int, int, str]:
    if name in SCRIPT_ORDER:
        return 0, SCRIPT_ORDER.index(name), name
    return (2 if name == "main.js" else 1), 0, name


def prepare_folder(out: Path) -> None:
    """Make ``out`` ready for a report: created if absent; a previous report removed; anything else refused."""
    if out.exists() and not out.is_dir():
        raise ReportFolderError(f"--out {out} is a file; give a folder for the report")
    if out.is_dir() and any(out.iterdir()):
        if not (out / MARKER).exists():
            raise ReportFolderError(
                f"--out {out} already holds files that are not a grove view report; give a new or empty folder"
            )
        for name in ("data", "assets"):
            shutil.rmtree(out / name, ignore_errors=True)
        (out / "index.html").unlink(missing_ok=True)
    (out / "data" / "pages").mkdir(parents=True, exist_ok=True)
    (out / "assets").mkdir(exist_ok=True)
    (out / MARKER).write_text("a report written by grove view; grove view may replace this folder's contents\n")


def write_site(out: Path, title: str, overview: dict[str, Any], pages: list[Page]) -> Path:
    """Write the report into ``out`` (see :func:`prepare_folder`); returns ``out/index.html``."""
    prepare_folder(out)
    scripts = []
    for asset in asset_files():
        if asset.name == TEMPLATE:
            continue
        (out / "assets" / asset.name).write_text(asset.read_text(encoding="utf-8"), encoding="utf-8")
        if asset.name.endswith(".js"):
            scripts.append(asset.name)
    (out / "data" / "run.js").write_text(data_script(overview), encoding="utf-8")
    for page in pages:
        (out / "data" / "pages" / f"{page.id}.js").write_text(
            data_script({"page": page.id, "items": page.items}), encoding="utf-8"
        )
    template = resources.files("grove.view").joinpath("assets", TEMPLATE).read_text(encoding="utf-8")
    scripts.sort(key=_load_order)
    tags = "\n".join(f'<script src="assets/{name}"></script>' for name in scripts)
    index = out / "index.html"
    page = template.replace("{{title}}", html.escape(visible_controls(title))).replace("{{scripts}}", tags)
    index.write_text(page, encoding="utf-8")
    return index
