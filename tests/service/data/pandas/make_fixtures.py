"""Writes the pandas fixtures of tests/service/baseline_test.cc, as a data scientist would:

    python3 -m venv venv && venv/bin/pip install pandas
    venv/bin/python tests/service/data/pandas/make_fixtures.py tests/service/data/pandas

reference.csv is df.to_csv() and reference.jsonl df.to_json(orient="records", lines=True),
both with pandas' defaults: the CSV starts with the unnamed index column, writes booleans as
True/False, a list as "[np.float64(0.1), ...]" (numpy 2's repr of numpy numbers), a numpy
array as "[0.1 0.2]", an int column with a missing value as floats ("3.0") and a missing value
as an empty cell. stream.jsonl is what a serving system logs for the same model later (same
distributions, plain JSON: true/false, whole numbers). The checked-in files were written with
pandas 3.1.1 and numpy 2.4.6.
"""
import json
import sys

import numpy as np
import pandas as pd

out = sys.argv[1] if len(sys.argv) > 1 else "."
rng = np.random.default_rng(20261204)


def frame(n, start):
    return pd.DataFrame({
        "model_id": ["fraud-v7"] * n,
        "event_time": pd.date_range(start, periods=n, freq="s"),
        "amount": np.round(rng.lognormal(3.5, 0.6, n), 2),
        # A list of numpy numbers per row, as list(array) gives.
        "scores": [list(np.round(rng.normal(0.5, 0.1, 2), 4)) for _ in range(n)],
        # A numpy array per row.
        "embedding": [np.round(rng.normal(0, 1, 2), 3) for _ in range(n)],
        "is_mobile": rng.random(n) < 0.4,
        "country": rng.choice(["FR", "DE", "ES", None], n, p=[0.5, 0.3, 0.15, 0.05]),
        # An int column with missing values: pandas makes it float64.
        "clicks": [None if rng.random() < 0.05 else int(rng.poisson(3)) for _ in range(n)],
    })


reference = frame(200, "2026-12-01")
reference.to_csv(f"{out}/reference.csv")
reference.to_json(f"{out}/reference.jsonl", orient="records", lines=True)

stream = frame(200, "2026-12-02")
with open(f"{out}/stream.jsonl", "w") as f:
    for row in stream.itertuples(index=False):
        f.write(json.dumps({
            "model_id": row.model_id,
            "event_time": row.event_time.isoformat() + "Z",
            "amount": float(row.amount),
            "scores": [float(x) for x in row.scores],
            "embedding": [float(x) for x in row.embedding],
            "is_mobile": bool(row.is_mobile),
            "country": row.country,
            "clicks": None if pd.isna(row.clicks) else int(row.clicks),
        }) + "\n")
