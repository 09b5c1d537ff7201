import type { CheckReport, FaultKind } from './checker';

function percentile(values: number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

/** Per fault kind: how often, and recovery p50 / p99 / max in ms. */
export function faultTable(report: CheckReport): { kind: FaultKind; count: number; p50: number; p99: number; max: number }[] {
  const kinds = [...new Set(report.faults.map((f) => f.kind))].sort();
  return kinds.map((kind) => {
    const count = report.faults.filter((f) => f.kind === kind).length;
    // A graceful stop that makes room for a join has no recovery of its own (the join's covers it).
    const times = report.faults.filter((f) => f.kind === kind && f.recoveryMs !== undefined).map((f) => f.recoveryMs!);
    return {
      kind,
      count,
      p50: percentile(times, 50),
      p99: percentile(times, 99),
      max: times.length ? times.reduce((a, b) => Math.max(a, b), -Infinity) : Number.NaN,
    };
  });
}

/** A person-readable summary: the counts the checker found and the recovery times per fault kind. */
export function formatReport(report: CheckReport): string {
  const lines = [
    `entries produced ${report.produced}, handled ${report.handled}, acknowledged ${report.acknowledged}, lost ${report.lost.length} (Redis lost ${report.redisLost.length}, trimmed unhandled ${report.trimmedUnhandled.length}; skipped by a reset ${report.skippedByReset.length}), ` +
      `order violations ${report.orderViolations.length}, overlaps ${report.overlaps.length}, key overlaps ${report.keyOverlaps.length}, stuck ${report.stuck.length}, ` +
      `dead letters ${report.deadLetters} (unfenced ${report.unfencedDeadLetters.length}), runs twice in a grant ${report.grantDuplicates.length}, written twice ${report.writtenTwice.length}, ` +
      `duplicates ${report.duplicates} (unexplained ${report.unexplainedDuplicates.length}), unrecovered faults ${report.unrecovered.length}, not replayed after a reset ${report.notReplayed.length}, dead letters not replayed once ${report.deadLetterOutcomes.length}, producer stalls ${report.producerStalls.length}`,
    `  delayed entries ${report.delayed.count}, early ${report.early.length}, released after their due time p99 ${report.delayed.releaseLateP99Ms} ms (max ${report.delayed.releaseLateMaxMs} ms), first run p99 ${report.delayed.lateP99Ms} ms (max ${report.delayed.lateMaxMs} ms); ` +
      `deferred ${report.deferrals.deferred}, parked ${report.deferrals.parked}`,
    ...faultTable(report).map((r) => `  ${r.kind}: ${r.count} × recovery p50 ${Math.round(r.p50)} ms, p99 ${Math.round(r.p99)} ms`),
    ...report.kinds.map(
      (k) =>
        `  member kind ${k.kind} (${k.members.join(', ')}; ${k.processes} processes): ${k.runs} runs, ${k.acknowledged} acknowledged, ` +
        `${k.deadLetters} dead letters, ${k.problems.length} problem lines naming its members${k.problems.length > 0 ? `, e.g. ${k.problems[0]}` : ''}`,
    ),
    ...transportLines(report),
    ...report.unrecovered.slice(0, 5).map((l) => `  unrecovered ${l}`),
    // Who did what during the first faults not recovered from (the first is usually the cause of the rest).
    ...report.faults
      .filter((f) => f.failed && f.members)
      .slice(0, 2)
      .flatMap((f) => [`  members during ${f.kind}${f.target ? ` ${f.target}` : ''}:`, ...f.members!.map((l) => `    ${l}`)]),
    ...report.producerStalls.slice(0, 5).map((l) => `  producer stalled ${l}`),
    ...report.stuck.slice(0, 5).map((l) => `  stuck ${l}`),
    ...report.unfencedDeadLetters.slice(0, 5).map((l) => `  unfenced dead letter ${l}`),
    ...report.grantDuplicates.slice(0, 5).map((l) => `  twice in a grant ${l}`),
    ...report.writtenTwice.slice(0, 5).map((l) => `  written twice ${l}`),
    ...report.notReplayed.slice(0, 5).map((l) => `  not replayed ${l}`),
    ...report.deadLetterOutcomes.slice(0, 5).map((l) => `  dead letter ${l}`),
    ...report.trimmedUnhandled.slice(0, 5).map((l) => `  trimmed unhandled ${l}`),
    ...report.lost.slice(0, 5).map((l) => `  lost ${l}`),
    ...report.orderViolations.slice(0, 5).map((l) => `  order ${l}`),
    ...report.early.slice(0, 5).map((l) => `  early ${l}`),
    ...(report.orderEvidence ?? []).map((l) => `  ${l}`),
    ...report.overlaps.slice(0, 5).map((l) => `  overlap ${l}`),
    ...report.keyOverlaps.slice(0, 5).map((l) => `  key overlap ${l}`),
    ...report.unexplainedDuplicates.slice(0, 5).map((l) => `  unexplained duplicate ${l}`),
  ];
  return lines.join('\n');
}

/** The transport actors' figures (when the run had any) and their broken promises. */
function transportLines(report: CheckReport): string[] {
  const f = report.transportFigures;
  if (!f || f.episodes === 0) return [];
  return [
    `  transport (${f.episodes} run${f.episodes === 1 ? '' : 's'}): requests ${f.requests}, answered ${f.answered}, timed out ${f.timedOut}, send failed ${f.sendFailed}; ` +
      `events ${f.events} (emit failed ${f.emitFailed}), handled ${f.handled}, handled again ${f.duplicates}; forged ${f.forged}, refused ${f.refused}; ` +
      `late replies dropped ${f.lateReplies}, inbox reads reset ${f.inboxReadTimeouts}, reply writes retried ${f.failedReplies}; broken promises ${report.transport.length}`,
    ...report.transport.slice(0, 20).map((l) => `  ${l}`),
  ];
}
