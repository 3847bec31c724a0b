"""The pure parts of ``experiments/minatar_table.py``: which ``distrl eval`` options score a column
(Freeway never cut: its cut column reads its uncut file), and the table's medians over seeds with
each seed's mean beside them."""

from __future__ import annotations

import json

from experiments import minatar_table as mt


def test_freeway_is_never_cut_and_the_others_keep_their_options():
    gymnax = ["--sticky-actions", "0", "--max-steps", "1000"]
    assert mt.eval_args("Freeway", "_gymnax", gymnax) == ["--sticky-actions", "0"]
    assert mt.eval_args("Breakout", "_gymnax", gymnax) == gymnax
    assert (
        mt.eval_args("Freeway", "", []) == [] and mt.parse_seeds("0-2") == [0, 1, 2] and mt.parse_seeds("1,4") == [1, 4]
    )
    assert mt.file_of("Freeway", "sample", "_1000") == "eval_last_sample.json"  # its cut column is the uncut one
    assert mt.file_of("Breakout", "greedy", "_1000") == "eval_last_greedy_1000.json"


def test_the_table_gives_the_median_over_seeds_and_each_seed(tmp_path):
    runs = []
    for seed, (mean, wall) in enumerate([(10.0, 600.0), (30.0, 1200.0), (14.0, 900.0)]):
        run = tmp_path / f"s{seed}"
        run.mkdir()
        (run / "summary.json").write_text(json.dumps({"wall_s": wall, "fps": 5_000.0 + seed}))
        (run / "eval_last_sample_gymnax.json").write_text(json.dumps({"mean": mean}))
        runs.append(run)
    (runs[0] / "eval_last_greedy.json").write_text(json.dumps({"mean": 7.0}))  # one seed only
    lines = mt.table({"Asterix": runs}).splitlines()
    assert len(lines) == 3 and lines[0].startswith("| game | gymnax PPO, 10M | seeds |")
    row = lines[2].split(" | ")
    assert row[:4] == ["| Asterix", "15", "3", "**14.0** (10.0, 30.0, 14.0)"]
    assert "**7.0** (7.0)" in row and row[-2:] == ["10.0, 20.0, 15.0", "5.0k, 5.0k, 5.0k |"]
    assert row.count("-") == 4  # the columns no run has
