"""What the main jobs print when their output goes to a file or a pipe (issue
55, point 5): no warning from any library, and progress as a few lines."""
import re


def assert_quiet(stdout, stderr, max_progress_lines=10):
    text = stdout + stderr
    warnings = [ln for ln in text.splitlines() if re.search(r"warn", ln, re.I)]
    assert not warnings, "\n".join(warnings)
    assert "\r" not in text, "progress bar updates written to a file"
    progress = [ln for ln in stdout.splitlines() if ln.startswith("train on ")]
    assert 0 < len(progress) <= max_progress_lines, progress
