import { execSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import { afterAll, expect, it, onTestFinished } from 'vitest';
import type { CheckReport } from './checker';
import { faultKindsOn, selectedFaultKinds } from './fault-selection';
import { FAULTS } from './faults';
import { ChaosHarness, DEFERRED_GROUP } from './harness';
import { faultTable, formatReport } from './report';
import type { TargetKind } from './target';

/** The long tier (scripts/test-chaos.js passes these): faults at random for the whole duration. */
const durationMs = Number(process.env.RSC_CHAOS_DURATION_MS ?? 600_000);
const seed = Number(process.env.RSC_CHAOS_SEED ?? 1);
const reportFile = process.env.RSC_CHAOS_REPORT;
// RSC_CHAOS_TARGET=cluster (--cluster): a Redis Cluster of 3 masters and 3 replicas, no proxies.
const target: TargetKind = process.env.RSC_CHAOS_TARGET === 'cluster' ? 'cluster' : 'single';
// The long tier runs every kind of its target unless told otherwise (RSC_CHAOS_FAULTS, or --faults).
const kinds = selectedFaultKinds(process.env.RSC_CHAOS_FAULTS ?? 'all', undefined, target);
// RSC_CHAOS_NO_WAIT=1 (--no-wait): on a cluster, sends and acks do not wait for a replica, to see
// what a failover loses then ("lost by Redis").
const waitForReplicas = process.env.RSC_CHAOS_NO_WAIT !== '1';
const replayFlags = `${target === 'cluster' ? ' --cluster' : ''}${waitForReplicas ? '' : ' --no-wait'}`;

/**
 * Key-ordered lanes per shard of every member process (RSC_CHAOS_MEMBER_LANES overrides). With one
 * lane a first attempt that fails holds its shard for the 100 ms backoff, so the handlers' 3% of
 * failures and 0.5% of dead letters cap a shard at about 190 entries/s (measured); the 50 keys' hash
 * puts 200-330 of the 1,100 entries/s on the hottest shard at every count from 4 to 10. Its backlog
 * then grew without end, and every ordered resize waited for it until its bound ran out (the run of
 * 47101e6). With 4 lanes a backoff holds only its own key.
 */
const SOAK_LANES = 4;
const lanes = Math.max(1, Number(process.env.RSC_CHAOS_MEMBER_LANES ?? SOAK_LANES) || SOAK_LANES);

const progress = (line: string) => process.stderr.write(`${line}\n`);

// Nothing the harness started outlives the file, however the test ended.
afterAll(() => ChaosHarness.stopAll('the soak ended'), 60_000);

it(`soak: random faults for ${Math.round(durationMs / 1000)} s on a ${target === 'cluster' ? 'Redis Cluster' : 'single redis-server'} (seed ${seed})`, async () => {
  // A soak that times out would go on injecting faults (and keep its processes) after vitest gave up on it.
  onTestFinished(() => ChaosHarness.stopAll('the soak test finished (passed, failed or timed out)'));
  const begin = Date.now();
  const elapsed = () => `[${Math.round((Date.now() - begin) / 1000)} s]`;
  const harness = await ChaosHarness.start({
    seed,
    rate: 1000,
    lanes,
    // Deferred retries in a group of their own beside the first (harness.ts, DEFERRED_GROUP).
    deferredGroup: true,
    target,
    waitForReplicas,
    progress: (line) => progress(`${elapsed()} ${line}`),
  });
  let report: CheckReport;
  try {
    const redis =
      target === 'cluster'
        ? `a cluster of 3 masters and 3 replicas${waitForReplicas ? ', sends and acks waiting for a replica' : ', nothing waiting for replicas'}`
        : 'AOF (appendfsync always)';
    progress(
      `${elapsed()} seed ${seed}, ${Math.round(durationMs / 1000)} s of faults (${kinds.join(', ')}); 3 member processes (and 2 of the deferring group ${harness.groups.includes(DEFERRED_GROUP) ? 'beside them' : 'not run'}), 8 shards, ${lanes} lane${lanes === 1 ? '' : 's'} per shard, ${redis}`,
    );
    while (Date.now() - begin < durationMs) {
      await new Promise((resolve) => setTimeout(resolve, 500 + harness.random() * 2500));
      await harness.inject(kinds[Math.floor(harness.random() * kinds.length)]);
    }
    // Load on a while after the last fault: what it stranded must be seen stuck.
    await new Promise((resolve) => setTimeout(resolve, 5000));
    progress(`${elapsed()} draining and checking`);
    report = await harness.finish(120_000);
  } finally {
    await harness.stop();
  }
  const text = formatReport(report);
  progress(text);
  if (reportFile) fs.writeFileSync(reportFile, reliabilityDoc(report, Date.now() - begin));
  const replay = `replay: npm run test:chaos --${replayFlags} --duration ${Math.round(durationMs / 1000)}s --seed ${seed} --faults ${kinds.join(',')}`;
  expect(report.unrecovered, replay).toEqual([]);
  expect(report.producerStalls, replay).toEqual([]);
  expect(report.lost, replay).toEqual([]);
  expect(report.trimmedUnhandled, replay).toEqual([]);
  expect(report.notReplayed, replay).toEqual([]);
  expect(report.deadLetterOutcomes, replay).toEqual([]);
  expect(report.stuck, replay).toEqual([]);
  expect(report.orderViolations, replay).toEqual([]);
  expect(report.early, replay).toEqual([]);
  expect(report.overlaps, replay).toEqual([]);
  expect(report.keyOverlaps, replay).toEqual([]);
  expect(report.unfencedDeadLetters, replay).toEqual([]);
  expect(report.grantDuplicates, replay).toEqual([]);
  expect(report.writtenTwice, replay).toEqual([]);
  expect(report.unexplainedDuplicates, replay).toEqual([]);
  expect(report.transport, replay).toEqual([]);
});

/** The commit the run measured (with "+ changes" when the working tree differs from it). */
function commit(): string {
  try {
    const head = execSync('git rev-parse --short HEAD', { encoding: 'utf8' }).trim();
    const dirty = execSync('git status --porcelain --untracked-files=no', { encoding: 'utf8' }).trim() !== '';
    return dirty ? `${head} + uncommitted changes` : head;
  } catch {
    return 'unknown';
  }
}

function reliabilityDoc(report: CheckReport, tookMs: number): string {
  const cpus = os.cpus();
  const row = (cells: (string | number)[]) => `| ${cells.join(' | ')} |`;
  const ms = (n: number) => (Number.isFinite(n) ? `${Math.round(n).toLocaleString('en-US')} ms` : '–');
  const template = fs.readFileSync(`${__dirname}/${target === 'cluster' ? 'reliability-cluster-doc.md' : 'reliability-doc.md'}`, 'utf8');
  const generated = [
    `Run ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC on ${cpus.length} × ${cpus[0]?.model ?? 'unknown'}, Node ${process.version}:`,
    `seed ${seed}, ${Math.round(durationMs / 60_000)} min of faults (${Math.round(tookMs / 1000)} s in all with start-up and the final drain).`,
    `Replay: \`npm run test:chaos --${replayFlags} --duration ${Math.round(durationMs / 1000)}s --seed ${seed} --faults ${kinds.length === faultKindsOn(target).length ? 'all' : kinds.join(',')}\`. Code: commit ${commit()}.`,
    '',
    row(['fault', 'what it does', 'injected', 'not recovered', 'recovery p50', 'recovery p99', 'max']),
    row(['---', '---', '---', '---', '---', '---', '---']),
    ...faultTable(report).map((r) =>
      row([
        r.kind,
        FAULTS[r.kind].what.replace(/\|/g, '\\|'),
        r.count,
        report.faults.filter((f) => f.kind === r.kind && f.failed).length,
        ms(r.p50),
        ms(r.p99),
        ms(r.max),
      ]),
    ),
    '',
    row([
      'produced',
      'handled (per group)',
      'acknowledged',
      'lost',
      'lost by Redis',
      'skipped by a reset',
      'trimmed unhandled',
      'order violations',
      'overlaps',
      'stuck',
      'dead letters',
      'unfenced',
      'not replayed once',
      'twice in a grant',
      'written twice',
      'duplicates',
      'unexplained',
    ]),
    row(Array(17).fill('---')),
    row([
      report.produced,
      report.handled,
      report.acknowledged,
      report.lost.length,
      report.redisLost.length,
      report.skippedByReset.length,
      report.trimmedUnhandled.length,
      report.orderViolations.length,
      report.overlaps.length,
      report.stuck.length,
      report.deadLetters,
      report.unfencedDeadLetters.length,
      report.deadLetterOutcomes.length,
      report.grantDuplicates.length,
      report.writtenTwice.length,
      report.duplicates,
      report.unexplainedDuplicates.length,
    ]),
    '',
    ...formatReport(report)
      .split('\n')
      .slice(1)
      .filter((l) => !/recovery p50/.test(l))
      .map((l) => `    ${l.trim()}`),
  ].join('\n');
  return template.replace('<!-- RESULTS -->', generated);
}
