"""Do the costs' 95% intervals keep their promise on stored lines? The A/A comparisons and the
true-null mode pairs of runs, replayed through the current interval and the stated one.

    python tools/interval_replay.py RUN_DIR [RUN_DIR...]

For each run, and for all together, per rule: the comparisons, how many show a cost that is not
there (a 95% interval excluding 1: a false cost) and the median relative half-width; first the
A/A comparisons (copy 1 of the baseline against copy 0 in the paired design, one per workload
over its replicates), then the true-null mode pairs.

**The stated rule ("a process floor"), fixed before it was replayed** (docs/measured.md,
"Intervals that hold on the GPU's own rounds"):

1. The point estimate is unchanged: the geometric mean over processes of each process's median
   per-round ratio.
2. Two or more processes: unchanged, the Kalibera-Jones t-interval on the process medians with
   P - 1 degrees of freedom; the process level is measured there.
3. One process: the process level is not measured, so it is taken as one round. With the n log
   ratios l of its rounds (n >= 6) and their robust spread s = 1.4826 * median(|l - median(l)|),
   the estimate's variance is s^2 * (k^2 + pi / (2n)), k = 1; the interval is
   exp(median(l) +- t(n - 1) * s * sqrt(1 + pi / (2n))) (t(n - 1): Student's 97.5% quantile),
   joined with today's distribution-free interval of the median, so never narrower than it.
   The draws use that standard error and n - 1 degrees of freedom. s = 0: today's interval.
4. k = 1 is fixed: a round figure at the top of the 0.4-1.4 rounds' spreads that the 108
   two-replicate costs of the H200 core run put the process level at; not fitted to the A/A
   comparisons, which are the test.
5. The interval says what it rests on: one process, "1 replicate, n rounds: the process level
   assumed at one round's spread (k = 1), not measured"; P, "P replicates, N rounds: the
   process level measured (t, P - 1 degrees of freedom)".
6. Read on the separate design (replay only; ``stats.ratio`` is not changed): one replicate,
   l = the log of the ratio of the two records' medians, s_B and s_M the MAD spreads of their
   log samples (n_B, n_M samples), variance s_B^2 (k^2 + pi/(2 n_B)) + s_M^2 (k^2 + pi/(2 n_M)),
   t with n_B + n_M - 2 degrees of freedom, joined with ``stats.ratio``'s interval; two or more
   replicates, ``stats.ratio`` as it is.

**True-null mode pairs** (the same computation on the GPU where the bits say so): on a workload
where disabling cuDNN leaves the bits unchanged (the cuDNN-off mode's fingerprint equals its
anchor's in every replicate that has both), each mode that differs from the anchor (``default``,
or ``det-algos`` for the deterministic family) only in cuDNN switches and has the anchor's
fingerprint in the same replicate. ``det-algos`` against ``default`` is never one (its cuBLAS
workspace can change the kernels). The bmm suite has no op with a cuDNN path at all; elsewhere
identical bits are evidence, not proof, and the pairs are counted apart.
"""
