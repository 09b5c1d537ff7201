/**
 * npm run bench:readpath [-- --quick]
 *
 * The figures of the shared read path (docs/runtime.md, Connections), quicker than the whole `npm run bench`:
 * scenario 2's I/O-bound cases with 64 workers, latency beside the raw XREADGROUP BLOCK loop (the
 * producer in a process of its own), and connections per process. Writes docs/benchmarks-readpath.md
 * with the machine's load average at the start and the end: on a shared machine the throughput
 * figures say as much about the neighbours as about the code.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import { loadAverage, progressSince, runCli } from './cli';
import { ioCase } from './io-bench';
import { connectionsFor, latency, type LatencyFigures, rawLatency } from './member-bench';
import { redisVersion } from './redis-stats';
import { type Spread, spread } from './stats';

const quick = process.argv.includes('--quick');
const repetitions = quick ? 1 : 3;
const started = Date.now();
const progress = progressSince(started);
const load = loadAverage;
const ms = (n: number) => `${n.toFixed(n < 1 ? 3 : 2)} ms`;
const withRange = (s: Spread, f: (n: number) => string) => `${f(s.median)} (${f(s.min)}–${f(s.max)})`;
const pct = (n: number) => `${(n * 100).toFixed(0)} %`;

async function main(): Promise<void> {
  const server = await RedisServer.start();
  const redis = new Redis(server.url);
  const loadBefore = load();
  const lines: string[] = [];
  try {
    const version = await redisVersion(redis);
    progress(`redis-server ${version}; load average ${loadBefore}`);
    const io: { label: string; ideal: number; rate: Spread; alone: Spread }[] = [];
    for (const [label, members, workers] of [
      ['one member, runtimeMaxConcurrency 64', 1, 64],
      ['4 members × 16 workers', 4, 16],
    ] as const) {
      const runs = [];
      for (let i = 0; i < repetitions; i++) runs.push(await ioCase(server.url, label, members, workers, quick ? 0.5 : 3));
      const rate = spread(runs.map((r) => r.rate));
      io.push({ label, ideal: Math.min(64, members * workers) * 1000, rate, alone: spread(runs.map((r) => r.alone)) });
      progress(`  ${label}: ${Math.round(rate.median)}/s (the handler alone ${Math.round(io[io.length - 1].alone.median)}/s)`);
    }
    const lat: { raw: LatencyFigures; member: LatencyFigures; shared: LatencyFigures }[] = [];
    for (let i = 0; i < repetitions; i++) {
      const raw = await rawLatency(server.url, 5000, quick ? 3 : 10);
      const member = await latency(server.url, 5000, quick ? 3 : 10);
      const shared = await latency(server.url, 5000, quick ? 3 : 10, true);
      lat.push({ raw, member, shared });
      progress(
        `  latency p50 ${ms(member.p50)} (raw ${ms(raw.p50)}, shared ${ms(shared.p50)}), p99 ${ms(member.p99)} (raw ${ms(raw.p99)}, shared ${ms(shared.p99)})`,
      );
    }
    const connections: { members: number; connections: number }[] = [];
    for (const members of [1, 8, 64]) connections.push({ members, connections: await connectionsFor(server.url, members) });
    progress(`  connections: ${connections.map((c) => `${c.members}: ${c.connections}`).join(', ')}`);

    const pick = (f: (x: { raw: LatencyFigures; member: LatencyFigures; shared: LatencyFigures }) => number) => spread(lat.map(f));
    const ratio = (s: Spread) => withRange(s, (n) => `${n.toFixed(2)} ×`);
    lines.push(
      '# Benchmarks: the shared read path',
      '',
      'Written by `npm run bench:readpath` (`-- --quick` for a smoke run); do not edit by hand. The I/O-bound',
      'cases are scenario 2 of `npm run bench` ([benchmarks.md](benchmarks.md)); the latency beside the raw',
      'loop and the connections are measured only here. This run takes minutes.',
      '',
      `Measured ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC on ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'unknown'}; Node ${process.version}, Redis ${version}.`,
      `${repetitions} repetition(s) per figure: the median, with min–max in parentheses. Load average`,
      `(1 / 5 / 15 min) at the start ${loadBefore}, at the end ${load()}: the machine is shared, and on 2`,
      'cores a load above 2 means this process waits for a core; the throughput figures fall with it.',
      '',
      '## I/O-bound handler (each call awaits ~1 ms), 64 pre-filled shards',
      '',
      '"The handler alone": as many loops awaiting the same timer in this process, no Redis, no member:',
      '`setTimeout(1)` takes longer than 1 ms, so this is the ceiling beside each case.',
      '',
      '| case | ideal | entries/s | of ideal | the handler alone | of the handler alone |',
      '| --- | --- | --- | --- | --- | --- |',
      ...io.map(
        (c) =>
          `| ${c.label} | ${c.ideal.toLocaleString('en-US')} | ${withRange(c.rate, (n) => Math.round(n).toLocaleString('en-US'))} | ${pct(c.rate.median / c.ideal)} | ${Math.round(c.alone.median).toLocaleString('en-US')} | ${pct(c.rate.median / c.alone.median)} |`,
      ),
      '',
      '## Latency from `send` to the handler starting, 5,000 entries/s, 8 shards',
      '',
      'The producer in a process of its own; raw: one connection, `XREADGROUP COUNT 100 BLOCK` over the 8',
      'streams; ours: one member with 8 workers, alone on its client (it reads with a blocking XREADGROUP on',
      "the read hub's connection), and shared: the same member with an idle second member made from the",
      "same client (the hub's doorbell, then a non-blocking read). Raw, ours and shared in turn in each repetition.",
      '',
      '| reader | p50 | p99 |',
      '| --- | --- | --- |',
      `| raw XREADGROUP BLOCK loop | ${withRange(
        pick((x) => x.raw.p50),
        ms,
      )} | ${withRange(
        pick((x) => x.raw.p99),
        ms,
      )} |`,
      `| CoordinatedMember | ${withRange(
        pick((x) => x.member.p50),
        ms,
      )} | ${withRange(
        pick((x) => x.member.p99),
        ms,
      )} |`,
      `| CoordinatedMember, shared read path | ${withRange(
        pick((x) => x.shared.p50),
        ms,
      )} | ${withRange(
        pick((x) => x.shared.p99),
        ms,
      )} |`,
      `| ours / raw | ${ratio(pick((x) => x.member.p50 / x.raw.p50))} | ${ratio(pick((x) => x.member.p99 / x.raw.p99))} |`,
      `| shared / raw | ${ratio(pick((x) => x.shared.p50 / x.raw.p50))} | ${ratio(pick((x) => x.shared.p99 / x.raw.p99))} |`,
      '',
      '## Connections per process',
      '',
      '| members made from one client | connections | before the read hub (2 + N) |',
      '| --- | --- | --- |',
      ...connections.map((c) => `| ${c.members} | ${c.connections} | ${2 + c.members} |`),
      '',
    );
    fs.writeFileSync(path.resolve(__dirname, '../../docs/benchmarks-readpath.md'), lines.join('\n'));
    progress('wrote docs/benchmarks-readpath.md');
  } finally {
    redis.disconnect();
    await server.stop();
  }
}

runCli(main);
