"""``detbench merge OUT DIR...``: shards of one run into one run, or runs from several machines
into one set.

- Shards (``run --shard K/N``) of one run, made in one environment, become the run made whole,
  each record and ``paired.jsonl`` line saying its shard; env.json is the first shard's, with
  ``shards`` saying where and when each ran.
- Whole runs (and at most one run's shards) from several machines become a set: every record and
  line says its ``machine``, and env.json's ``machines`` holds each one's env.json.

Everything is checked before anything is written (``check_shards``); a refusal is one line. Runs
from several machines whose workloads differ are merged, with a note (``machine_notes``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detbench.core.errors import DetbenchError
from detbench.store.identity import SOURCES_KEY, describe, differences, identity, steps, text
from detbench.store.outdir import refuse_used
from detbench.store.paired import PairedWriter, iter_paired
from detbench.store.record import merged
from detbench.store.results import (
    ENV_FILE,
    ResultWriter,
    env_facts,
    iter_records,
    load_env,
    utc_now,
    write_json_atomic,
)

#: Options that may differ between the shards of one run (``sources``: another checkout per node).
SHARD_FREE = ("argv", "shard", "sources", "inherited_cublas_workspace_config")
#: A later replicate's note when its first replicate, which counts the FLOPs, ran in another shard.
NO_COUNT = "the first replicate, which counts the FLOPs, has no count"


class MergeError(DetbenchError):
    """Runs that cannot be merged as asked (one clear line; nothing was written)."""


@dataclass
class Part:
    """One directory given to merge, with its records and ``paired.jsonl`` lines."""

    path: Path
    env: dict[str, Any]
    records: list[dict[str, Any]]
    lines: list[dict[str, Any]] = field(default_factory=list)

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.env.get("options") or {})

    @property
    def shard(self) -> tuple[int, int] | None:
        s = self.options.get("shard")
        return (int(s[0]), int(s[1])) if s else None

    def facts(self) -> dict[str, Any]:
        return {**env_facts(self.env), "sm_count": (self.env.get("worker") or {}).get("sm_count")}


@dataclass
class Merged:
    """What merge wrote: ``kind`` "run" (shards joined) or "machines" (a set)."""

    out: Path
    kind: str
    records: int
    machines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _key(rec: dict[str, Any]) -> tuple[str, str, str, int]:
    return (str(rec["suite"]), str(rec["workload"]), str(rec["mode"]), int(rec["replicate"]))


def load_part(d: Path) -> Part:
    if not d.is_dir():
        raise MergeError(f"no such results directory: {d}")
    if not (d / ENV_FILE).is_file():
        raise MergeError(f"{d} holds no {ENV_FILE}: not a detbench run")
    env = load_env(d)
    if env.get("machines"):
        raise MergeError(
            f"{d} is a set of runs from several machines already; merge the runs it was made from"
        )
    return Part(d, env, [dict(r) for r in iter_records(d)], [dict(o) for o in iter_paired(d)])


def check_shards(shards: list[Part]) -> None:
    """Refuse shards that are not the disjoint shards of one run made in one environment, with
    the same options and suite sources, each workload run alike (``store.identity``)."""
    first = shards[0]
    k0, n0 = first.shard or (0, 0)
    seen: dict[int, Path] = {}
    for p in shards:
        k, n = p.shard or (0, 0)
        if n != n0:
            raise MergeError(
                f"{first.path} is shard {k0}/{n0} but {p.path} is shard {k}/{n}: "
                "the shards of one run split it the same way"
            )
        o1, o2 = first.options, p.options
        name = next(
            (x for x in sorted({*o1, *o2} - set(SHARD_FREE)) if o1.get(x) != o2.get(x)), None
        )
        if name == SOURCES_KEY:
            a, b = o1.get(name) or {}, o2.get(name) or {}
            suites = sorted(x for x in {*a, *b} if a.get(x) != b.get(x))
            raise MergeError(
                f"the shards ran another source of the suite {', '.join(suites)}: "
                f"its files differ between {first.path} and {p.path}; merge only "
                "the shards of one run"
            )
        if name is not None:
            raise MergeError(
                f"the shards' options differ in {name}: {o1.get(name)!r} ({first.path}) vs "
                f"{o2.get(name)!r} ({p.path}); merge only the shards of one run"
            )
        if k in seen:
            raise MergeError(f"{seen[k]} and {p.path} are both shard {k}/{n}: they overlap")
        seen[k] = p.path
        fa, fb = first.facts(), p.facts()
        diff = [f for f in fa if fa[f] != fb[f]]
        if diff:
            raise MergeError(
                f"the shards ran in different environments: {diff[0]} {fa[diff[0]]} "
                f"({first.path}) vs {fb[diff[0]]} ({p.path}); a run's shards must share one, so "
                "run each machine's own run and merge those instead"
            )
    unlike = workload_differences(shards, [str(p.path) for p in shards])
    if unlike:
        workload, words = unlike[0]
        raise MergeError(
            f"the shards ran {workload} as two different workloads: {words}; "
            "merge only the shards of one run"
        )
    owner: dict[tuple[str, str, str, int], Path] = {}
    for p in shards:
        for rec in p.records:
            key = _key(rec)
            if key in owner:
                raise MergeError(
                    f"{owner[key]} and {p.path} overlap: both hold {key[0]}/{key[1]} in "
                    f"{key[2]}, replicate {key[3] + 1}"
                )
            owner[key] = p.path


def _workloads(p: Part) -> dict[str, dict[str, str]]:
    """Each workload of ``p``'s identity, hashed steps and digest method (its first record's)."""
    out: dict[str, dict[str, str]] = {}
    for rec in p.records:
        key = f"{rec['suite']}/{rec['workload']}"
        if key not in out and rec.get("fingerprint"):
            out[key] = {
                **identity(rec, p.env),
                "steps": text(steps(rec)),
                "method": text(rec.get("fingerprint_method")),
            }
    return out


def workload_differences(parts: list[Part], names: list[str]) -> list[tuple[str, str]]:
    """(workload, what differs) for each workload that ``parts`` (named ``names``) ran as two."""
    words = {"steps": "hashed steps", "method": "digest method"}
    seen: dict[str, tuple[str, dict[str, str]]] = {}
    out: list[tuple[str, str]] = []
    for name, p in zip(names, parts, strict=True):
        for key, mine in _workloads(p).items():
            if key not in seen:
                seen[key] = (name, mine)
                continue
            ref_name, ref = seen[key]
            diff = [describe(f, ref[f], mine[f], ref_name, name) for f in differences(ref, mine)]
            diff += [
                f"{w} {ref[f]} ({ref_name}) vs {mine[f]} ({name})"
                for f, w in words.items()
                if ref[f] and mine[f] and ref[f] != mine[f]
            ]
            if diff:
                out.append((key, "; ".join(diff)))
    return out


def machine_notes(groups: list[list[Part]], names: list[str]) -> list[str]:
    """Notes for a set whose machines ran some workload differently, grouped by what differs."""
    firsts = [g[0] for g in groups]
    by_words: dict[str, list[str]] = {}
    for key, words in workload_differences(firsts, names):
        by_words.setdefault(words, []).append(key)
    out = []
    for words, keys in by_words.items():
        only_steps = all(w.startswith("hashed steps") for w in words.split("; "))
        both = "both" if len(groups) == 2 else "all"
        then = (
            f"compare reads their bits over the steps {both} ran"
            if only_steps
            else "compare calls them not comparable"
        )
        shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
        out.append(
            f"the machines ran {len(keys)} workload{'s' if len(keys) != 1 else ''} "
            f"differently ({shown}): {words}; {then}"
        )
    return out


def fill_flops(records: list[dict[str, Any]]) -> None:
    """A later replicate whose first replicate ran in another shard takes that one's count."""
    counted = {
        _key(r)[:3]: r.get("flops_per_step")
        for r in records
        if r.get("replicate") == 0 and r.get("flops_source") == "counted"
    }
    for r in records:
        flops = counted.get(_key(r)[:3])
        if r.get("flops_note") == NO_COUNT and flops is not None:
            r.pop("flops_note")
            r["flops_per_step"], r["flops_source"] = flops, "counted"
            if r.get("seconds_per_step"):
                r["flops_per_second"] = flops / r["seconds_per_step"]


def _run_order(records: list[dict[str, Any]], options: dict[str, Any]) -> list[dict[str, Any]]:
    """Records in the order a whole run writes them: replicate, the mode's place in it, workload."""
    where = {k: i for i, k in enumerate(options.get("workloads") or [])}
    return sorted(
        records,
        key=lambda r: (
            int(r["replicate"]),
            int(r.get("mode_position") or 0),
            where.get(f"{r['suite']}/{r['workload']}", len(where)),
            str(r["mode"]),
        ),
    )


Joined = tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], list[str]]


def join_shards(shards: list[Part]) -> Joined:
    """The records, ``paired.jsonl`` lines and env.json of the run the shards make, and notes
    (missing shards). A shard times whole groups, so its lines are kept as they are."""
    shards = sorted(shards, key=lambda p: p.shard)  # type: ignore[arg-type, return-value]
    n = shards[0].shard[1]  # type: ignore[index]
    records, lines = [], []
    for p in shards:
        records += [merged(r, shard=f"{p.shard[0]}/{n}") for r in p.records]  # type: ignore[index]
        lines += [{**o, "shard": f"{p.shard[0]}/{n}"} for o in p.lines]  # type: ignore[index]
    fill_flops(records)
    env = copy.deepcopy(shards[0].env)
    env["options"] = {**env.get("options", {}), "shard": None, "shards": n}
    env["shards"] = [
        {
            "shard": f"{p.shard[0]}/{n}",  # type: ignore[index]
            "dir": str(p.path),
            "node": (p.env.get("host") or {}).get("node"),
            "job": (p.env.get("host") or {}).get("job"),
            "started_utc": p.env.get("started_utc"),
            "finished_utc": p.env.get("finished_utc"),
            "records": len(p.records),
            "run_stats": p.env.get("run_stats"),
        }
        for p in shards
    ]
    env["started_utc"] = min(str(p.env.get("started_utc") or "") for p in shards) or None
    finished = [str(p.env.get("finished_utc") or "") for p in shards]
    env["finished_utc"] = max(finished) if all(finished) else None
    stats = [p.env.get("run_stats") or {} for p in shards]
    env["run_stats"] = {
        k: sum(s.get(k) or 0 for s in stats)
        for k in stats[0]
        if all(isinstance(s.get(k, 0), (int, float)) for s in stats)
    }
    env["run_stats_note"] = f"sums over the {len(shards)} shards"
    workers = {k: v for p in shards for k, v in (p.env.get("device_workers") or {}).items()}
    if workers:
        env["device_workers"] = workers
    have = {p.shard[0] for p in shards}  # type: ignore[index]
    notes = [
        f"shard {k}/{n} is missing: the merged run lacks its records; run it with "
        f"--shard {k}/{n} and merge again"
        for k in range(1, n + 1)
        if k not in have
    ]
    return _run_order(records, env["options"]), lines, env, notes


def _names(parts: list[list[Part]]) -> list[str]:
    """A machine's name: its directory's (a shard's: the folder holding the shards), made unique."""
    names: list[str] = []
    for group in parts:
        p = group[0].path.resolve()
        base = p.parent.name if len(group) > 1 else p.name
        name, i = base, 2
        while name in names:
            name, i = f"{base}-{i}", i + 1
        names.append(name)
    return names


def _inside(out: Path, dirs: Sequence[Path]) -> set[str]:
    """The entries of ``out`` that hold one of ``dirs``."""
    top = out.resolve()
    paths = [Path(d).resolve() for d in dirs]
    return {p.relative_to(top).parts[0] for p in paths if p != top and p.is_relative_to(top)}


def merge(out: Path, dirs: Sequence[Path]) -> Merged:
    """Merge ``dirs`` into ``out``; nothing is written on a refusal."""
    # submit's jobs write under OUT/parts/: those are not counted as OUT's files.
    refuse_used(out, "OUT", inside=_inside(out, dirs))
    if len(dirs) < 2:
        raise MergeError(
            "give at least two directories: the shards of a run, or runs from several machines"
        )
    parts = [load_part(Path(d)) for d in dirs]
    resolved = [p.path.resolve() for p in parts]
    if len(set(resolved)) < len(resolved):
        raise MergeError("a directory is given twice")
    if out.resolve() in resolved:
        raise MergeError(f"{out} is one of the directories merged; give a new OUT")
    shards = [p for p in parts if p.shard is not None]
    whole = [p for p in parts if p.shard is None]
    if shards:
        check_shards(shards)
    groups: list[list[Part]] = ([shards] if shards else []) + [[p] for p in whole]
    if len(groups) == 1:  # the shards of one run
        records, lines, env, notes = join_shards(shards)
        env["merged_utc"] = utc_now()
        _write(out, records, lines, env)
        return Merged(out, "run", len(records), notes=notes)
    names = _names(groups)
    records, lines, envs, notes = [], [], {}, machine_notes(groups, names)
    for name, group in zip(names, groups, strict=True):
        if group[0].shard is not None:
            recs, got, env, missing = join_shards(group)
            notes += missing
        else:
            recs, got, env = group[0].records, group[0].lines, group[0].env
        envs[name] = env
        records += [merged(r, machine=name) for r in recs]
        lines += [{**o, "machine": name} for o in got]
    doc = {
        "schema_version": 1,
        "merged_utc": utc_now(),
        "machines": envs,
        "machine_order": names,
        "merged_from": [str(p.path) for p in parts],
    }
    _write(out, records, lines, doc)
    return Merged(out, "machines", len(records), names, notes)


def _write(
    out: Path, records: list[dict[str, Any]], lines: list[dict[str, Any]], env: dict[str, Any]
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with ResultWriter(out) as w:
        for rec in records:
            w.append(rec)
    if lines:
        with PairedWriter(out) as p:
            p.append_all(lines)
    write_json_atomic(out / ENV_FILE, env)
