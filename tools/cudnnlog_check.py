"""Check ``detbench run --cudnn-log`` where it matters, on a GPU (docs/gpu-session.md).

    python tools/cudnnlog_check.py DIR

For each record of the run in DIR, its engines against its worker's whole cuDNN log
(``DIR/logs/rR-MODE.cudnn.log``, read after the worker exited): a record agrees when every
convolution it names settled, in the whole log, on the engine the record gives. A record reads
only the bytes its workload added by the end of its fingerprint pass, so a disagreement means the
worker read too little (cuDNN still held bytes back) or another workload's. Then, for each
(workload, mode), each replicate's bits and the convolutions whose engine differed between
replicates. Exit status 1 when a record disagrees or none names an engine.
"""

from __future__ import annotations

import sys
from pathlib import Path

from detbench.analysis.engines import describe, differs, engine_choices
from detbench.store.results import load_results
from detbench.worker.cudnnlog import parse


def main(directory: Path) -> int:
    df = load_results(directory)
    whole: dict[Path, dict[str, str]] = {}
    agree = disagree = 0
    for rec in df.to_dict("records"):
        engines = rec.get("cudnn_engines")
        if not isinstance(engines, list) or not engines:
            print(f"{rec['workload']} {rec['mode']} r{rec['replicate']}: {engines}")
            continue
        log = directory / "logs" / f"r{rec['replicate']}-{rec['mode']}.cudnn.log"
        if log not in whole:
            parsed = parse(log.read_text(errors="replace"))
            whole[log] = {f"{e.op} {e.shapes}": e.engine for e in parsed.engines}
        for e in engines:
            conv = f"{e['op']} {e['shapes']}"
            if whole[log].get(conv) == e["engine"]:
                agree += 1
            else:
                disagree += 1
                print(
                    f"DISAGREE {log.name} {conv}: record {e['engine']}, log {whole[log].get(conv)}"
                )
    for (key, mode), by_rep in sorted(engine_choices(df).items()):
        rows = df[(df["suite"] + "/" + df["workload"] == key) & (df["mode"] == mode)]
        bits = {
            int(r): str(f)[:12] for r, f in zip(rows["replicate"], rows["fingerprint"], strict=True)
        }
        print(f"{key} [{mode}] bits by replicate: {bits}")
        for conv, chosen in differs(by_rep).items():
            print("  " + describe(conv, chosen))
    print(f"{agree} convolutions agree with their worker's whole log, {disagree} do not")
    return 0 if agree and not disagree else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
