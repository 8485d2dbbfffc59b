"""Package files cite what a reader of the repository has (issue 32): a file of the repository, or
an upstream file at a pinned snapshot (``kueue@ff69552 path``, listed in docs/kubernetes-kinds.md)
or URL; never notes kept beside the repository (``shared/docs``) or a machine's own paths."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gpujobs", "gpujobs_magic", "gpujobs_sim")
PRODUCT = ("gpujobs", "gpujobs_magic")

OUTSIDE = (
    # (pattern, where it is refused)
    (re.compile(r"shared/docs"), PACKAGES),
    (re.compile(r"/work/"), PACKAGES),
    # the simulator reads its CRDs from that folder ($GPUJOBS_CRDS_DIR); the product cites upstream
    (re.compile(r"shared/crds"), PRODUCT),
)
MD = re.compile(r"[\w./-]*\w\.md\b")
URL = re.compile(r"https?://\S+")
SNAPSHOT = re.compile(r"\b[\w-]+@[0-9a-f]{7,40}\b")


def package_lines():
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                yield pkg, path, n, line


def resolves(token: str, path: Path) -> bool:
    return (ROOT / token).is_file() or (path.parent / token).is_file()


def test_no_package_file_cites_a_path_outside_the_repository():
    bad = []
    for pkg, path, n, line in package_lines():
        where = f"{path.relative_to(ROOT)}:{n}"
        bad += [f"{where}: {pat.pattern}" for pat, pkgs in OUTSIDE if pkg in pkgs and pat.search(line)]
        if SNAPSHOT.search(line):
            continue  # an upstream file at a pinned snapshot
        bad += [f"{where}: {tok}" for tok in MD.findall(URL.sub("", line)) if not resolves(tok, path)]
    assert bad == []


def test_docs_cite_no_notes_outside_the_repository():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    bad = [f"{p.name}: {line.strip()[:80]}" for p in pages for line in p.read_text().splitlines()
           if "shared/docs" in line]
    assert bad == []
