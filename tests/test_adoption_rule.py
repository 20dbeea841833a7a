"""The adoption rule over the development sets (experiments/adoption_rule.py)."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from flashsim.experiments import adoption_rule as ar

ROOT = Path(__file__).resolve().parents[1]


def _groups(**mapes):
    return {("dev", impl): {"n": n, "mape": m} for impl, (n, m) in mapes.items()}


def test_a_candidate_passes_when_no_group_worsens_much_and_the_mean_falls():
    before = _groups(v2=(30, 6.0), v3=(30, 8.0))
    assert ar.compare(before, _groups(v2=(30, 7.5), v3=(30, 6.0)))["passes"]
    assert not ar.compare(before, _groups(v2=(30, 8.5), v3=(30, 4.0)))["passes"]  # v2 worse by 2.5 points
    assert not ar.compare(before, _groups(v2=(30, 6.0), v3=(30, 8.0)))["passes"]  # the mean must fall
    weighted = ar.compare(_groups(v2=(10, 10.0), v3=(30, 2.0)), _groups(v2=(10, 8.0), v3=(30, 2.5)))
    assert weighted["mean_before"] == pytest.approx(4.0) and weighted["mean_after"] == pytest.approx(4.0 - 0.125)


def test_groups_in_one_report_only_are_named():
    result = ar.compare(_groups(v2=(30, 6.0)), _groups(v2=(30, 5.0), v3=(30, 1.0)))
    assert result["missing"] == [["dev", "v3"]] and len(result["rows"]) == 1


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs the git history")
def test_the_committed_reports_against_themselves_do_not_pass(monkeypatch, tmp_path, capsys):
    """The same reports before and after: nothing worse, but the mean does not fall, so the rule fails."""
    monkeypatch.chdir(ROOT)
    for ds in ar.DEV_SETS:
        text = subprocess.run(["git", "show", f"HEAD:{(ar.RESULTS / ds.report).as_posix()}"], capture_output=True,
                              text=True, check=True).stdout
        (tmp_path / ds.report).write_text(text)
    assert ar.main(["--before", "HEAD", "--after", str(tmp_path), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["worst_change"] == 0 and result["mean_before"] == result["mean_after"] and result["rows_total"] > 500


def test_a_bad_revision_is_one_line_and_exit_2(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert ar.main(["--before", "no-such-revision-at-all"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("adoption_rule: cannot read")
