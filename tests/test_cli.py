"""``voicews serve`` takes its defaults from the config; docs/operations.md shows the same ones."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from voicews.cli import main, parser, serve_config
from voicews.dialects.realtime import limits
from voicews.engines import BUNDLED_VOICE
from voicews.engines.piper import bundled_voice
from voicews.protocol import Limits
from voicews.server import ServerConfig

OPERATIONS = (Path(__file__).parent.parent / "docs" / "operations.md").read_text()


def table(heading: str) -> dict[str, list[str]]:
    """The docs' table whose header row starts with ``heading``: cells by first cell's code."""
    lines = OPERATIONS.split(f"\n| {heading} |")[1].split("\n\n")[0].splitlines()[2:]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    return {row[0].strip("`"): row[1:] for row in rows}


def serve_options() -> dict[str, object]:
    defaults = vars(parser().parse_args(["serve"]))
    return {"--" + dest.replace("_", "-"): v for dest, v in defaults.items() if dest != "command"}


def test_serve_defaults_are_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VOICEWS_TOKENS", raising=False)
    assert serve_config(parser().parse_args(["serve"])) == ServerConfig()


def test_the_connection_bounds_are_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VOICEWS_TOKENS", raising=False)
    args = parser().parse_args(["serve", "--request-timeout", "2.5", "--max-connections", "9"])
    config = serve_config(args)
    assert (config.request_timeout, config.max_connections) == (2.5, 9)


def test_the_context_limits_are_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VOICEWS_TOKENS", raising=False)
    args = parser().parse_args(["serve", "--max-contexts", "3", "--context-idle-s", "90"])
    session = serve_config(args).session
    assert (session.max_contexts, session.context_idle_s) == (3, 90.0)
    for bad in (["--max-contexts", "0"], ["--context-idle-s", "-1"], ["--context-idle-s", "nan"]):
        with pytest.raises(SystemExit):
            parser().parse_args(["serve", *bad])


def test_the_bundled_voice_is_the_one_named() -> None:
    assert bundled_voice().name == f"{BUNDLED_VOICE}.onnx"


def test_readme_lists_every_serve_option_with_its_default() -> None:
    rows = table("`voicews serve` option")
    options = serve_options()
    assert set(rows) == set(options)
    for option, default in options.items():
        if default is not None and default != []:
            shown = f"{default:g}" if isinstance(default, float) else str(default)
            assert rows[option][0] == f"`{shown}`", option


def test_readme_limits_table_shows_the_defaults() -> None:
    """Every advertised limit, with the default a session gets from a default server."""
    config = ServerConfig()
    advertised = limits(config.session, config.max_sessions)
    rows = table("limit")
    assert set(rows) == set(Limits.model_fields)
    for name, (default, *_) in rows.items():
        number = re.sub(r" \(.*\)$", "", default).replace(",", "")
        value = float(number.removesuffix(" KiB")) * (1024 if number.endswith("KiB") else 1)
        assert value == getattr(advertised, name), name


def test_a_lexicon_file_and_a_locale_set_how_text_is_read(tmp_path: Path) -> None:
    words = tmp_path / "words.tsv"
    words.write_text("# brand names\nXiaomi\tshao mee\n\nNguyen\twin\n", encoding="utf-8")
    config = serve_config(
        parser().parse_args(["serve", "--lexicon", str(words), "--locale", "en-GB"])
    )
    assert config.session.reading.locale == "en-GB"
    assert dict(config.session.reading.lexicon) == {"xiaomi": "shao mee", "nguyen": "win"}
    words.write_text("no tab here\n", encoding="utf-8")
    with pytest.raises(SystemExit) as refused:
        main(["serve", "--lexicon", str(words)])
    assert refused.value.code == 2  # argparse's usage error, naming the file and line
