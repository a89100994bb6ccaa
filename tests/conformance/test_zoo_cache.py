"""The zoo's exports are reused between runs only while what they depend on is unchanged.

Fast (no export): the key and the folder choice of tests/conformance/zoo_cache.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")

from tests.conformance import zoo, zoo_cache  # noqa: E402  (after the skip: needs torch and transformers)


@pytest.fixture()
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("MHAINSPECT_ZOO_DIR", "MHAINSPECT_ZOO_CACHE", "CI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def test_the_cache_is_outside_the_repository_and_keyed(clean_env: Path,
                                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    folder, how = zoo_cache.zoo_dir(tmp_path_factory)
    assert how == "cache"
    assert folder == clean_env / "cache" / "mhainspect-tests" / f"zoo-{zoo_cache.zoo_key()}"
    assert zoo_cache.zoo_key() == zoo_cache.zoo_key()  # stable while nothing changes


def test_a_new_package_version_or_generator_gives_a_new_key(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = zoo_cache.zoo_key()
    versions = zoo._versions()
    monkeypatch.setattr(zoo, "_versions", lambda: {**versions, "transformers": "0.0.0-other"})
    assert zoo_cache.zoo_key() != before
    monkeypatch.undo()
    assert zoo_cache.zoo_key() == before
    edited = clean_env / "zoo.py"
    edited.write_bytes(zoo_cache._GENERATOR[0].read_bytes() + b"\n# an edit\n")
    monkeypatch.setattr(zoo_cache, "_GENERATOR", (edited, zoo_cache._GENERATOR[1]))
    assert zoo_cache.zoo_key() != before


@pytest.mark.parametrize(("env", "how"), [({"CI": "true"}, "fresh"), ({"MHAINSPECT_ZOO_CACHE": "0"}, "fresh"),
                                          ({"MHAINSPECT_ZOO_DIR": "given"}, "MHAINSPECT_ZOO_DIR")])
def test_ci_builds_fresh_and_a_given_folder_wins(clean_env: Path, monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path_factory: pytest.TempPathFactory, env: dict[str, str],
                                                 how: str) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, str(clean_env / value) if name == "MHAINSPECT_ZOO_DIR" else value)
    folder, said = zoo_cache.zoo_dir(tmp_path_factory)
    assert said == how
    assert "mhainspect-tests" not in str(folder)
