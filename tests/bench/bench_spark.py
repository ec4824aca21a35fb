#!/usr/bin/env python3
"""driftd beside PySpark on the seed's pipeline, on the same generated files, in one run.

The pipeline: JSON-lines inference logs (model_id, event_time, feature_vector of 8 doubles,
prediction, ground_truth) -> per model: count, mean and stddev of every feature and of the
prediction -> output files. driftd runs it as a pipeline file (file source, availableNow);
PySpark runs it as Structured Streaming does (readStream json with the schema, groupBy,
agg, availableNow, local[N]). Both are timed as whole processes, from start to exit, with the
CPU time of the process tree (getrusage of waited children). Then the per-model results are
compared: counts equal, means and standard deviations within 1e-9 relative.

  python3 bench_spark.py --build BUILD_DIR [--records 10000000,2000000] [--cores 2]
                         [--spark-python PYTHON] [--dir DIR] [--keep]

--spark-python names an interpreter that has pyspark (pip install pyspark; Java 17 is
needed); by default this interpreter. Exit codes: 0 the results agree, 1 they differ or a run
failed, 77 pyspark is not installed (nothing measured).
"""

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

FEATURES = 8

SPARK_JOB = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession, functions as F
    from pyspark.sql.types import (ArrayType, DoubleType, StringType, StructField, StructType,
                                   TimestampType)

    input_dir, output_dir, checkpoint_dir, cores, features = sys.argv[1:6]
    features = int(features)
    spark = (SparkSession.builder.master(f"local[{cores}]").appName("seed-pipeline")
             .config("spark.sql.shuffle.partitions", cores)
             .config("spark.ui.enabled", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    schema = StructType([
        StructField("model_id", StringType(), False),
        StructField("event_time", TimestampType()),
        StructField("feature_vector", ArrayType(DoubleType())),
        StructField("prediction", DoubleType()),
        StructField("ground_truth", DoubleType()),
    ])
    logs = spark.readStream.schema(schema).json(input_dir)
    aggregates = [F.count(F.lit(1)).alias("count")]
    for i in range(features):
        value = F.col("feature_vector")[i]
        aggregates += [F.avg(value).alias(f"mean(feature_vector[{i}])"),
                       F.stddev(value).alias(f"stddev(feature_vector[{i}])")]
    aggregates += [F.avg("prediction").alias("mean(prediction)"),
                   F.stddev("prediction").alias("stddev(prediction)")]
    stats = logs.groupBy("model_id").agg(*aggregates)

    def write(batch, batch_id):
        batch.coalesce(1).write.mode("append").json(output_dir)

    query = (stats.writeStream.outputMode("update").foreachBatch(write)
             .option("checkpointLocation", checkpoint_dir).trigger(availableNow=True).start())
    query.awaitTermination()
    spark.stop()
    """
)


def driftd_pipeline(directory, input_dir, output_dir):
    aggregates = ["count"]
    aggregates += ["mean(feature_vector)", "stddev(feature_vector)"]
    aggregates += ["mean(prediction)", "stddev(prediction)"]
    return textwrap.dedent(
        f"""\
        name: seed-bench
        schema:
          - {{name: model_id, type: string, nullable: false}}
          - {{name: event_time, type: timestamp}}
          - {{name: feature_vector, type: array<double>}}
          - {{name: prediction, type: double}}
          - {{name: ground_truth, type: double}}
        source:
          format: file
          options: {{path: {input_dir}}}
        query:
          groupBy: [model_id]
          aggregates: [{", ".join(aggregates)}]
        sinks:
          - {{name: stats, format: file, stream: stats, outputMode: update, options: {{path: {output_dir}}}}}
        trigger: {{availableNow: true}}
        checkpointLocation: {os.path.join(directory, "driftd-checkpoint")}
        """
    )


def run_timed(argv, log_path, env=None):
    """Runs argv to its exit; returns (exit code, wall seconds, CPU seconds of its tree)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    with open(log_path, "w") as log:
        code = subprocess.call(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return code, wall, cpu


def read_rows(output_dir):
    """Every JSON row of the output files, in file order (part files sort by batch)."""
    rows = []
    for root, _, files in sorted(os.walk(output_dir)):
        for name in sorted(files):
            if name.startswith((".", "_")) or name.endswith((".crc", ".tmp")):
                continue
            with open(os.path.join(root, name)) as f:
                for line in f:
                    line = line.strip()
                    if line.startswith("{"):
                        rows.append(json.loads(line))
    return rows


def last_row_per_model(rows):
    """The final statistics of each model: the row with the largest count (rows only grow)."""
    final = {}
    for row in rows:
        model = row.get("model_id")
        if model is None or "count" not in row:
            continue
        if model not in final or row["count"] >= final[model]["count"]:
            final[model] = row
    return final


def compare(driftd_rows, spark_rows):
    """Problems found comparing the two result tables; empty when they agree."""
    problems = []
    if sorted(driftd_rows) != sorted(spark_rows):
        problems.append(f"models differ: driftd {sorted(driftd_rows)}, spark {sorted(spark_rows)}")
        return problems
    columns = ["count"]
    for i in range(FEATURES):
        columns += [f"mean(feature_vector[{i}])", f"stddev(feature_vector[{i}])"]
    columns += ["mean(prediction)", "stddev(prediction)"]
    for model in sorted(driftd_rows):
        for column in columns:
            a = driftd_rows[model].get(column)
            b = spark_rows[model].get(column)
            if a is None or b is None:
                problems.append(f"{model} {column}: driftd {a}, spark {b}")
            elif column == "count":
                if a != b:
                    problems.append(f"{model} count: driftd {a}, spark {b}")
            elif not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12):
                problems.append(f"{model} {column}: driftd {a!r}, spark {b!r}")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", required=True, help="driftd build directory")
    parser.add_argument("--records", default="10000000,2000000")
    parser.add_argument("--cores", type=int, default=2, help="Spark's local[N]")
    parser.add_argument("--spark-python", default=sys.executable)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()

    probe = subprocess.run([args.spark_python, "-c", "import pyspark; print(pyspark.__version__)"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"pyspark is not installed for {args.spark_python}; nothing measured "
              "(pip install pyspark, then --spark-python PYTHON)")
        return 77
    spark_version = probe.stdout.strip()
    spark_submit = os.path.join(os.path.dirname(args.spark_python), "spark-submit")
    if not os.path.exists(spark_submit):
        spark_submit = shutil.which("spark-submit") or spark_submit

    driftd = os.path.join(args.build, "cmd", "driftd")
    generate = os.path.join(args.build, "tests", "gen_inference")
    base = args.dir or tempfile.mkdtemp(prefix="driftd-bench-spark-")
    os.makedirs(base, exist_ok=True)
    env = dict(os.environ, PYSPARK_PYTHON=args.spark_python, PYSPARK_DRIVER_PYTHON=args.spark_python)
    with open(os.path.join(base, "seed_pipeline.py"), "w") as f:
        f.write(SPARK_JOB)

    print(f"seed pipeline: file -> count/mean/stddev per model (8 models x {FEATURES} features) "
          f"-> file; PySpark {spark_version} local[{args.cores}]; machine load "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'records':>10} {'tool':>8} {'wall s':>8} {'rec/s':>12} {'CPU s':>8} "
          f"{'CPU-us/rec':>10}")
    failed = False
    for records in [int(r) for r in args.records.split(",")]:
        directory = os.path.join(base, str(records))
        shutil.rmtree(directory, ignore_errors=True)
        input_dir = os.path.join(directory, "input")
        subprocess.check_call([generate, "--records", str(records), "--dir", input_dir],
                              stdout=subprocess.DEVNULL)
        driftd_out = os.path.join(directory, "driftd-output")
        with open(os.path.join(directory, "pipeline.yaml"), "w") as f:
            f.write(driftd_pipeline(directory, input_dir, driftd_out))
        results = {}
        for tool in ("driftd", "spark"):
            if tool == "driftd":
                argv = [driftd, "run", os.path.join(directory, "pipeline.yaml"), "--http", "off",
                        "--quiet-progress"]
                out = driftd_out
            else:
                out = os.path.join(directory, "spark-output")
                argv = [spark_submit, "--master", f"local[{args.cores}]",
                        os.path.join(base, "seed_pipeline.py"), input_dir, out,
                        os.path.join(directory, "spark-checkpoint"), str(args.cores), str(FEATURES)]
            code, wall, cpu = run_timed(argv, os.path.join(directory, f"{tool}.log"), env)
            if code != 0:
                print(f"{tool} exited with {code}; see {os.path.join(directory, tool + '.log')}")
                failed = True
                break
            results[tool] = (wall, cpu, last_row_per_model(read_rows(out)))
            print(f"{records:>10} {tool:>8} {wall:>8.2f} {records / wall:>12,.0f} {cpu:>8.2f} "
                  f"{cpu * 1e6 / records:>10.2f}")
        if failed:
            break
        (d_wall, d_cpu, d_rows), (s_wall, s_cpu, s_rows) = results["driftd"], results["spark"]
        problems = compare(d_rows, s_rows)
        verdict = "results agree" if not problems else "RESULTS DIFFER"
        print(f"{records:>10} driftd / spark: {s_wall / d_wall:.1f}x the throughput, "
              f"{s_cpu / d_cpu:.1f}x less CPU per record; {verdict} "
              f"({len(d_rows)} models, counts exact, moments within 1e-9)")
        for problem in problems[:10]:
            print(f"    {problem}")
        failed = failed or bool(problems)
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    if not args.keep and not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    print("(whole-process figures: start-up included; Spark's includes its JVM start)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
