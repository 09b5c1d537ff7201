import { execSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import { expect, it } from 'vitest';
import type { CheckReport } from './checker';
import { selectedFaultKinds } from './faults';
import { ChaosHarness } from './harness';
import { faultTable, formatReport } from './report';

/** The long tier (scripts/test-chaos.js passes these): faults at random for the whole duration. */
const durationMs = Number(process.env.RSC_CHAOS_DURATION_MS ?? 600_000);
const seed = Number(process.env.RSC_CHAOS_SEED ?? 1);
const reportFile = process.env.RSC_CHAOS_REPORT;
const kinds = selectedFaultKinds();

const progress = (line: string) => process.stderr.write(`${line}\n`);

it(`soak: random faults for ${Math.round(durationMs / 1000)} s (seed ${seed})`, async () => {
  const begin = Date.now();
  const elapsed = () => `[${Math.round((Date.now() - begin) / 1000)} s]`;
  const harness = await ChaosHarness.start({ seed, rate: 1000, progress: (line) => progress(`${elapsed()} ${line}`) });
  let report: CheckReport;
  try {
    progress(`${elapsed()} seed ${seed}, ${Math.round(durationMs / 1000)} s of faults; 3 member processes, 8 shards, AOF (appendfsync always)`);
    while (Date.now() - begin < durationMs) {
      await new Promise((resolve) => setTimeout(resolve, 500 + harness.random() * 2500));
      await harness.inject(kinds[Math.floor(harness.random() * kinds.length)]);
    }
    progress(`${elapsed()} draining and checking`);
    report = await harness.finish(120_000);
  } finally {
    await harness.stop();
  }
  const text = formatReport(report);
  progress(text);
  if (reportFile) fs.writeFileSync(reportFile, reliabilityDoc(report, Date.now() - begin));
  const replay = `replay: npm run test:chaos -- --duration ${Math.round(durationMs / 1000)}s --seed ${seed}`;
  expect(report.lost, replay).toEqual([]);
  expect(report.orderViolations, replay).toEqual([]);
  expect(report.overlaps, replay).toEqual([]);
  expect(report.unexplainedDuplicates, replay).toEqual([]);
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
  return [
    '# Reliability',
    '',
    'Written by `npm run test:chaos` (the long tier of the reliability harness, `test/reliability/`); do not edit by hand.',
    '',
    `Run ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC on ${cpus.length} × ${cpus[0]?.model ?? 'unknown'}, Node ${process.version}:`,
    `seed ${seed}, ${Math.round(durationMs / 60_000)} min of faults (${Math.round(tookMs / 1000)} s in all with start-up and the final drain).`,
    `Replay: \`npm run test:chaos -- --duration ${Math.round(durationMs / 1000)}s --seed ${seed}\`. Code: commit ${commit()}.`,
    '',
    'Three member processes (4 workers each, session timeout 1 s) read 8 shards of a private',
    '`redis-server` with AOF and `appendfsync always`, each through its own loopback TCP proxy; this',
    'process writes 1,000 keyed entries/s (50 keys, per-key sequence numbers). Faults, one at a time,',
    'at random 0.5–3 s apart; after each the driver waits until the group is STABLE with every shard',
    'owned by a running member (the recovery time below).',
    '',
    '| fault | what it does |',
    '| --- | --- |',
    '| kill | `SIGKILL` of a member process; a new one is started |',
    '| pause | `SIGSTOP` until the others own its shards, one session more, then `SIGCONT`: a zombie holding stale ownership |',
    '| graceful | `SIGTERM`: the member drains, acknowledges and leaves; a new one is started |',
    '| join | a new member process joins (the oldest leaves gracefully when there are more than four) |',
    '| redis-restart | `SIGKILL` of redis-server, restarted on the same port and AOF |',
    '| partition | the member\'s proxy stops forwarding both ways until the others own its shards, one session more, then heals |',
    '| reset | every connection of one member reset at once |',
    '',
    row(['fault', 'injected', 'recovery p50', 'recovery p99', 'max']),
    row(['---', '---', '---', '---', '---']),
    ...faultTable(report).map((r) => row([r.kind, r.count, ms(r.p50), ms(r.p99), ms(r.max)])),
    '',
    row(['entries produced', 'handled', 'acknowledged', 'lost', 'order violations', 'overlaps (accepted ack)', 'duplicates', 'unexplained duplicates']),
    row(['---', '---', '---', '---', '---', '---', '---', '---']),
    row([report.produced, report.handled, report.acknowledged, report.lost.length, report.orderViolations.length, report.overlaps.length, report.duplicates, report.unexplainedDuplicates.length]),
    '',
    '- **lost**: acknowledged to the producer, never handled to the end by any member (must be 0).',
    '- **order violations**: a key\'s sequence number handled for the first time after a higher one (must be 0; redeliveries do not count).',
    '- **overlaps**: two members handling entries of one shard at the same time where the earlier one\'s acknowledgement was accepted (must be 0; a zombie\'s refused acknowledgement is the allowed case).',
    '- **duplicates**: entries handled more than once (at-least-once); each must be explained by a kill, pause, partition or reset of the member that ran it first (or ran it again), or a Redis restart, between 1 s before the first run and the second. Graceful stops and joins explain none.',
    '',
  ].join('\n');
}
