"""No traceback reaches the user: bad options, bad files, an unwritable home, broken pipes, bugs.

Every refusal is one `spectui: ...` line on stderr with a non-zero exit code; options are refused
where they are parsed (exit 2), naming the option, the value and the allowed range.
"""

from __future__ import annotations

import errno
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import tiny_gguf

from spectui import cli
from spectui.chat.template import PromptStyle
from spectui.cli import build_parser, main, with_default_command
from spectui.engine.events import Finished
from spectui.engine.files.gguf_file import diagnose, expected_size
from spectui.engine.generation_config import DraftControl, GenerationConfig, SamplingConfig
from spectui.engine.generator import load_generator
from spectui.engine.model.file_checks import check_compatible_files
from spectui.errors import IncompatibleDraftError, ModelLoadError
from spectui.session.options import COMPLETION_MAX_TOKENS, DEFAULT_MAX_TOKENS, options_from_args


def one_error_line(stderr: str, *, alone: bool = False) -> str:
    """Exactly one `spectui: ...` line and no traceback (`alone`: and nothing else at all;
    otherwise progress lines such as bench's `loading ...` may come before it)."""
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("spectui: ")]
    assert len(errors) == 1, lines
    if alone:
        assert lines == errors
    return errors[0]


BAD_OPTIONS = [
    (["bench", "--repeat", "0"], "--repeat", "from 1 to 100", "not 0"),
    (["bench", "--repeat", "100000000"], "--repeat", "from 1 to 100", "not 100000000"),
    (["bench", "--repeat", "two"], "--repeat", "whole number", "'two'"),
    (["bench", "--seed", "-1"], "--seed", "from 0 to 4294967295", "not -1"),
    (["chat", "--seed", "4294967296"], "--seed", "from 0 to 4294967295", "not 4294967296"),
    (["chat", "--seed", "1.5"], "--seed", "whole number", "'1.5'"),
    (["bench", "--max-tokens", "0"], "--max-tokens", "from 2 to", "not 0"),
    (["bench", "--max-tokens", "-5"], "--max-tokens", "from 2 to", "not -5"),
    (["bench", "--max-tokens", "1"], "--max-tokens", "from 2 to", "not 1"),
    (["chat", "--max-tokens", "0"], "--max-tokens", "from 1 to", "not 0"),
    (["--max-tokens", "-5"], "--max-tokens", "from 1 to", "not -5"),
    (["chat", "--temperature", "-1"], "--temperature", "from 0 (greedy) to 100", "not -1"),
    (["chat", "--temperature", "nan"], "--temperature", "from 0 (greedy) to 100", "not nan"),
    (["bench", "--temperature", "inf"], "--temperature", "from 0 (greedy) to 100", "not inf"),
    (["bench", "--temperature", "1e999"], "--temperature", "from 0 (greedy) to 100", "not 1e999"),
    (["chat", "--temperature", "warm"], "--temperature", "a number", "'warm'"),
    (["chat", "--ctx", "16"], "--ctx", "multiple of 256 from 256", "not 16"),
    (["chat", "--ctx", "0"], "--ctx", "multiple of 256 from 256", "not 0"),
    (["bench", "--ctx", "1000"], "--ctx", "use 768 or 1024", "not 1000"),
    (["chat", "--ctx", "300"], "--ctx", "use 256 or 512", "not 300"),
    (["chat", "--ctx", str(2**40)], "--ctx", "to 16777216", f"not {2**40}"),
    (["chat", "--threads", "0"], "--threads", "from 1 to 512", "not 0"),
    (["bench", "--threads", "-2"], "--threads", "from 1 to 512", "not -2"),
    (["chat", "--threads", "100000"], "--threads", "from 1 to 512", "not 100000"),
    (["chat", "--n-gpu-layers", "-7"], "--n-gpu-layers", "-1 (all layers) or a whole number from 0", "not -7"),
    (["bench", "--draft-n-gpu-layers", "-2"], "--draft-n-gpu-layers", "-1 (all layers)", "not -2"),
    (["chat", "--n-gpu-layers", str(2**32)], "--n-gpu-layers", "to 9999", f"not {2**32}"),
    (["bench", "-k", "0"], "-k/--draft-length", "K=0 is the speculation-off baseline", "'0'"),
    (["bench", "-k", "0,4"], "-k/--draft-length", "K=0 is the speculation-off baseline", "'0,4'"),
    (["bench", "-k", "4,4"], "-k/--draft-length", "K=4 is listed twice", "'4,4'"),
    (["bench", "-k", ","], "-k/--draft-length", "1..16, 'auto'", "','"),
    (["bench", "-k", "1,99"], "-k/--draft-length", "0..16 or 'auto'", "not 99"),
    (["chat", "-k", "17"], "-k/--draft-length", "0..16 or 'auto'", "not 17"),
    (["chat", "-k", "-1"], "-k/--draft-length", "0..16 or 'auto'", "not -1"),
    (["chat", "-k", "fast"], "-k/--draft-length", "0..16 or 'auto'", "'fast'"),
    (["bench", "--prompt", ""], "--prompt", "must not be empty", "''"),
    (["bench", "--prompt", "   "], "--prompt", "must not be empty", "'   '"),
    (["chat", "--target", ""], "--target", "path to a file", "empty string"),
    (["bench", "--draft", ""], "--draft", "path to a file", "empty string"),
    (["chat", ""], "pair", "pair name", "empty string"),
    (["bench", "--pair", ""], "--pair", "pair name", "empty string"),
    (["rm", ""], "pair", "pair name", "empty string"),
    (["pull", "--name", " "], "--name", "pair name", "empty string"),
]


@pytest.mark.parametrize(("argv", "option", "allowed", "given"), BAD_OPTIONS,
                         ids=[" ".join(case[0]) or "''" for case in BAD_OPTIONS])
def test_a_bad_option_is_one_line_naming_option_range_and_value(argv, option, allowed, given, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    line = one_error_line(err, alone=True)
    assert option in line and allowed in line and given in line
    assert out == ""


@pytest.mark.parametrize(("argv", "attribute", "value"), [
    (["--ctx", "256"], "ctx", 256),
    (["--ctx", "16777216"], "ctx", 16777216),
    (["--seed", "0"], "seed", 0),
    (["--seed", "4294967295"], "seed", 4294967295),
    (["--n-gpu-layers", "-1"], "n_gpu_layers", -1),
    (["--n-gpu-layers", "0"], "n_gpu_layers", 0),
    (["--temperature", "0"], "temperature", 0.0),
    (["--temperature", "100"], "temperature", 100.0),
    (["--max-tokens", "1"], "max_tokens", 1),
    (["--threads", "1"], "threads", 1),
    (["-k", "0"], "draft_length", 0),
    (["-k", "auto"], "draft_length", "auto"),
    (["bench", "-k", "1, 16,auto"], "draft_length", [1, 16, "auto"]),
    (["bench", "--repeat", "100"], "repeat", 100),
])
def test_values_at_the_edges_of_their_ranges_are_taken_as_given(argv, attribute, value):
    args = build_parser().parse_args(with_default_command(argv))
    assert getattr(args, attribute) == value


def test_a_bench_whose_replies_end_at_once_reports_no_speedup_instead_of_failing(tiny_pair):
    from spectui.bench.report import RunInfo, RunTotals, make_row

    nothing = RunTotals(tokens=0, seconds=0.0, drafted=0, accepted=0, passes=0, outputs=((),),
                        prompt_tokens=3, prompt_seconds=0.01)
    info = RunInfo(tiny_pair.target, tiny_pair.draft, "model", "draft model draft.gguf")
    row = make_row(4, GenerationConfig(max_tokens=2), [nothing, nothing], [nothing, nothing], info)
    assert row.speedup == 0.0 and row.baseline_tps == 0.0 and row.identical is True


def test_chat_options_keep_max_tokens_as_given(tiny_pair):
    parse = build_parser().parse_args
    one = options_from_args(parse(["chat", "--target", str(tiny_pair.target), "--max-tokens", "1"]))
    assert one.max_tokens == 1
    default = options_from_args(parse(["chat", "--target", str(tiny_pair.target)]))
    assert default.max_tokens is None  # the mode decides: a chat reply or a base model's continuation
    assert default.reply_request([], DraftControl(0)).max_tokens == DEFAULT_MAX_TOKENS
    continuation = PromptStyle(mode="completion")
    assert default.reply_request([], DraftControl(0), style=continuation).max_tokens == COMPLETION_MAX_TOKENS


# ----- files that are not models ----------------------------------------------------------------


def hostile_files(directory: Path) -> dict[str, tuple[Path, str]]:
    """name -> (path, what the one line must say)."""
    directory.mkdir(parents=True, exist_ok=True)
    fifo = directory / "fifo.gguf"
    os.mkfifo(fifo)
    files = {
        "empty": (b"", "is empty"),
        "short": (b"GG", "only 2 bytes long"),
        "html": (b"<html>404</html>", "is not a GGUF file (it starts with b'<htm'"),
        "huge-counts": (b"GGUF" + struct.pack("<IQQ", 3, 2**63, 2**63), "its header is damaged"),
        "huge-string": (b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 2**62) + b"x" * 16, "its header is damaged"),
        "version-9": (b"GGUF" + struct.pack("<IQQ", 9, 0, 0), "GGUF version 9"),
        "magic-only": (b"GGUF", "its header is damaged"),
    }
    found = {"directory": (directory, "is not a file"), "fifo": (fifo, "is not a file"),
             "missing": (directory / "nowhere.gguf", "model file not found")}
    for name, (data, says) in files.items():
        path = directory / f"{name}.gguf"
        path.write_bytes(data)
        found[name] = (path, says)
    return found


def test_every_hostile_model_file_is_one_line_in_bench(tiny_pair, tmp_path, capsys):
    for name, (path, says) in hostile_files(tmp_path / "hostile").items():
        for role in ("--target", "--draft"):
            other = "--draft" if role == "--target" else "--target"
            good = tiny_pair.draft if role == "--target" else tiny_pair.target
            code = main(["bench", role, str(path), other, str(good), "--max-tokens", "4"])
            line = one_error_line(capsys.readouterr().err)
            assert code == 1, (name, role)
            assert says in line and str(path) in line, (name, line)


def test_a_damaged_header_is_diagnosed_without_reading_it_all(tmp_path):
    files = hostile_files(tmp_path)
    assert expected_size(files["huge-counts"][0]) is None
    assert expected_size(files["huge-string"][0]) is None
    assert "download it again" in diagnose(files["huge-counts"][0])
    assert "upgrade" not in diagnose(files["version-9"][0])


def test_load_failure_advice_is_true_for_the_pinned_llama_cpp(tiny_pair, tmp_path):
    unknown = tmp_path / "unknown-arch.gguf"
    data = tiny_pair.target.read_bytes().replace(b"llama", b"llamz", 1)  # general.architecture
    unknown.write_bytes(data)
    with pytest.raises(ModelLoadError) as caught:
        load_generator(unknown, None, n_ctx=256)
    message = str(caught.value)
    assert "llama-cpp-python 0.3.36" in message and "upgrade" not in message


# ----- vocabularies that differ at the end --------------------------------------------------------


def test_a_draft_with_more_tokens_than_the_target_is_refused_with_the_reason(tmp_path, capsys):
    pair = tiny_gguf.write_pair_with_vocabularies(tmp_path, target_extra=0, draft_extra=4)
    n = len(tiny_gguf.vocabulary())
    with pytest.raises(IncompatibleDraftError, match=rf"could propose token ids {n}\.\.{n + 3}, which the target"):
        check_compatible_files(pair.target, pair.draft)
    with pytest.raises(IncompatibleDraftError, match="cannot score"):
        load_generator(pair.target, pair.draft, n_ctx=256)
    assert main(["bench", "--target", str(pair.target), "--draft", str(pair.draft)]) == 1
    assert f"the draft has {n + 4} tokens and the target {n}" in one_error_line(capsys.readouterr().err)
    one_more = tiny_gguf.write_pair_with_vocabularies(tmp_path / "one", target_extra=0, draft_extra=1)
    with pytest.raises(IncompatibleDraftError, match=rf"could propose token id {n}, which"):
        check_compatible_files(one_more.target, one_more.draft)


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_a_target_with_more_tokens_than_its_draft_works_even_when_it_writes_them(tmp_path, temperature):
    pair = tiny_gguf.write_pair_with_vocabularies(tmp_path, target_extra=4, draft_extra=0)
    n = len(tiny_gguf.vocabulary())
    check_compatible_files(pair.target, pair.draft)
    gen = load_generator(pair.target, pair.draft, n_ctx=512)
    try:
        prompt = gen.target.tokenize("Once upon a time the")
        config = GenerationConfig(max_tokens=48, sampling=SamplingConfig(temperature=temperature, seed=3))

        def reply(k: int) -> Finished:
            gen.reset()
            return next(e for e in gen.generate(prompt, config, DraftControl(k)) if isinstance(e, Finished))

        speculative, plain = reply(4), reply(0)
    finally:
        gen.close()
    assert speculative.reason in ("length", "eos") and speculative.stats.drafted > 0
    assert any(token >= n for token in speculative.tokens)  # the target wrote ids the draft lacks
    if temperature == 0.0:
        assert speculative.tokens == plain.tokens  # and the output is still the target's own


# ----- catalog and home ----------------------------------------------------------------------------


def test_a_models_toml_that_is_not_utf8_is_one_line(spectui_home, capsys):
    config = spectui_home / "config"
    config.mkdir(parents=True)
    (config / "models.toml").write_bytes(b'[pairs."caf\xe9"]\ndescription = "x"\n')
    assert main(["list"]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "models.toml: not UTF-8" in line and "0xe9" in line


def test_a_pulled_record_that_is_not_utf8_is_one_line(spectui_home, capsys):
    data = spectui_home / "data"
    data.mkdir(parents=True)
    (data / "pulled.json").write_bytes(b"\xff\xfe{}")
    assert main(["list"]) == 1
    assert "pulled.json is damaged (not UTF-8" in one_error_line(capsys.readouterr().err)


@pytest.fixture
def home_is_a_file(tmp_path, monkeypatch) -> Path:
    """SPECTUI_HOME names a file: nothing can be created under it, not even by root."""
    home = tmp_path / "home"
    home.write_text("not a directory")
    monkeypatch.setenv("SPECTUI_HOME", str(home))
    return home


def test_an_unwritable_home_lists_but_refuses_to_pull_or_remove(home_is_a_file, capsys):
    assert main(["list"]) == 0
    capsys.readouterr()
    for argv in (["pull", "demo"], ["rm", "demo"], ["pull", "--target", "a", "--draft", "b", "--name", "x"]):
        assert main(argv) == 1
        line = one_error_line(capsys.readouterr().err)
        assert f"cannot write to {home_is_a_file / 'data'}" in line and "SPECTUI_HOME=/some/dir" in line


def test_chat_on_an_unwritable_home_without_models_is_one_line(home_is_a_file, capsys):
    assert main(["chat"]) == 1  # the demo pair cannot be built there (or its package is missing)
    line = one_error_line(capsys.readouterr().err)
    assert str(home_is_a_file) in line or "pip install" in line


# ----- the last resort -------------------------------------------------------------------------------


def _raising(error: BaseException):
    def command(args) -> int:
        raise error

    return lambda name: command


def test_a_home_with_a_tilde_for_no_user_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv("SPECTUI_HOME", "~no-such-user-here/spectui")
    assert main(["list"]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "SPECTUI_HOME=~no-such-user-here/spectui" in line and "full path" in line


def test_a_bug_is_one_line_naming_a_log_with_the_traceback(spectui_home, monkeypatch, capsys):
    monkeypatch.setattr(cli, "_command", _raising(RuntimeError("boom\nsecond line")))
    assert main(["list"]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "unexpected error while running `spectui list` (RuntimeError: boom)" in line
    [log] = (spectui_home / "logs").iterdir()
    assert str(log) in line
    text = log.read_text()
    assert "Traceback" in text and "RuntimeError: boom" in text and "second line" in text


def test_the_log_goes_to_the_temporary_directory_when_home_cannot_hold_it(
        home_is_a_file, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    monkeypatch.setattr(cli, "_command", _raising(ValueError("bad")))
    assert main(["list"]) == 1
    line = one_error_line(capsys.readouterr().err)
    [log] = (tmp_path / "tmp" / "spectui-logs").iterdir()
    assert str(log) in line and "ValueError: bad" in log.read_text()


def test_a_file_or_disk_error_is_one_line_without_a_log(spectui_home, monkeypatch, capsys):
    error = OSError(errno.EROFS, "Read-only file system", "/mnt/ro/models/x.gguf")
    monkeypatch.setattr(cli, "_command", _raising(error))
    assert main(["list"]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "/mnt/ro/models/x.gguf (Read-only file system)" in line and "SPECTUI_HOME" in line
    assert not (spectui_home / "logs").exists()


@pytest.mark.parametrize("argv", [["list"], ["list", "--json"], ["--help"], ["bench", "--help"]])
def test_a_closed_pipe_ends_quietly(spectui_home, argv):
    read, write = os.pipe()
    os.close(read)  # the reader is gone before spectui writes (`spectui list | head -0`)
    try:
        result = subprocess.run([sys.executable, "-m", "spectui", *argv], stdout=write,
                                stderr=subprocess.PIPE, timeout=120, check=False)
    finally:
        os.close(write)
    assert result.stderr == b""
    # argparse itself ignores a failed write of its help (exit 0); a command's output exits 141
    assert result.returncode == (0 if "--help" in argv else cli.EXIT_BROKEN_PIPE)


def _read_only_mount_works(directory: Path) -> bool:
    if os.geteuid() != 0 or not Path("/usr/bin/unshare").exists():
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {directory} {directory} && "
                            f"mount -o remount,ro,bind {directory}"], capture_output=True, timeout=30, check=False)
    return probe.returncode == 0


def test_a_read_only_mount_runs_chats_unsaved_and_refuses_to_pull(tmp_path):
    """A real read-only file system (EROFS), in a private mount namespace: only where the test
    runs as root with `unshare` (elsewhere the file-where-a-directory-should-be tests cover it)."""
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    if not _read_only_mount_works(home):
        pytest.skip("needs root and unshare -m to make a read-only mount")
    from spectui.chat.store import ChatStore

    store = ChatStore(home / "data" / "chats.sqlite3")
    store.add_message(store.new_chat("tiny"), "user", "an old question")
    store.close()
    check = (
        "from spectui.chat.safe_store import SafeStore; from spectui.paths import chats_db_path\n"
        "s = SafeStore(chats_db_path()); print(s.saving, [c.title for c in s.list_chats()])\n"
        "print(s.notices[0][0])\n"
    )
    script = (f"mount --bind {home} {home} && mount -o remount,ro,bind {home} && "
              f"{sys.executable} -m spectui list >/dev/null && echo LIST-OK; "
              f"{sys.executable} -m spectui pull demo; echo PULL=$?; "
              f"{sys.executable} -c '{check}'")
    result = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True,
                            timeout=300, check=False, env={**os.environ, "SPECTUI_HOME": str(home)})
    assert "LIST-OK" in result.stdout and "PULL=1" in result.stdout
    assert "Traceback" not in result.stderr
    line = one_error_line(result.stderr)
    assert f"cannot write to {home / 'data'} (Read-only file system)" in line and "SPECTUI_HOME" in line
    assert "False ['an old question']" in result.stdout
    assert "this chat runs unsaved" in result.stdout and "1 past chat can still be read" in result.stdout
