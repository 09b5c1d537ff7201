#!/usr/bin/env node
// npm run test:chaos -- --duration 30m --seed 42 [--faults all|kind,kind] [--report docs/reliability.md]
// npm run test:chaos -- --cluster [--no-wait] ... (a Redis Cluster; report docs/reliability-cluster.md)
// Parses the options, builds the core and Nest packages (member and transport processes run their compiled code) and runs the
// long tier of the reliability harness (test/reliability/soak.chaos.ts) through vitest. The fault
// kinds are listed in test/reliability/faults.ts (with where each runs).

const { spawnSync } = require('node:child_process');
const path = require('node:path');

const usage =
  'usage: npm run test:chaos -- [--cluster [--no-wait]] [--duration 10m] [--seed N] [--faults all|kind,kind] [--report docs/reliability.md]';
const options = { duration: '10m', seed: String(Math.floor(Math.random() * 2 ** 31)), faults: 'all', report: undefined };
// Flags without a value: --cluster runs on a Redis Cluster (3 masters, 3 replicas; its fault kinds),
// --no-wait there makes sends and acks not wait for a replica (what a failover loses is then "lost by Redis").
const flags = { cluster: false, 'no-wait': false };
const args = process.argv.slice(2);
for (let i = 0; i < args.length; i++) {
  const name = args[i].replace(/^--/, '');
  if (name in flags) {
    flags[name] = true;
    continue;
  }
  if (!(name in options) || args[i + 1] === undefined) {
    console.error(`unknown option or missing value: ${args[i]}\n${usage}`);
    process.exit(2);
  }
  options[name] = args[++i];
}
const match = /^(\d+)(ms|s|m|h)?$/.exec(options.duration);
if (!match) {
  console.error(`--duration must look like 90s, 10m or 1h, got "${options.duration}"\n${usage}`);
  process.exit(2);
}
const durationMs = Number(match[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[match[2] ?? 's'];
if (!/^\d+$/.test(options.seed)) {
  console.error(`--seed must be a non-negative integer, got "${options.seed}"\n${usage}`);
  process.exit(2);
}
if (!/^[a-z-]+(,[a-z-]+)*$/.test(options.faults)) {
  console.error(`--faults must be "all" or fault kinds separated by commas, got "${options.faults}"\n${usage}`);
  process.exit(2);
}

if (flags['no-wait'] && !flags.cluster) {
  console.error(`--no-wait applies to --cluster only\n${usage}`);
  process.exit(2);
}
options.report ??= flags.cluster ? 'docs/reliability-cluster.md' : 'docs/reliability.md';

const root = path.resolve(__dirname, '..');
const run = (command, commandArgs, env) => {
  const result = spawnSync(command, commandArgs, { cwd: root, stdio: 'inherit', env: { ...process.env, ...env } });
  return result.status ?? 1;
};
// The member processes run the core's compiled code, the transport kind's processes the Nest package's.
if (run('npm', ['run', 'build', '--silent', '--workspace', 'packages/core', '--workspace', 'packages/nestjs']) !== 0) process.exit(1);
const status = run('npx', ['vitest', 'run', '--config', 'vitest.chaos.mts'], {
  RSC_CHAOS_DURATION_MS: String(durationMs),
  RSC_CHAOS_SEED: options.seed,
  RSC_CHAOS_FAULTS: options.faults,
  RSC_CHAOS_REPORT: path.resolve(root, options.report),
  RSC_CHAOS_TARGET: flags.cluster ? 'cluster' : 'single',
  RSC_CHAOS_NO_WAIT: flags['no-wait'] ? '1' : '',
  // The final check holds every record of the run: a 30-minute soak's outgrow V8's default heap
  // (the check died of it once). The machine has memory to spare.
  NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --max-old-space-size=12288`.trim(),
});
if (status !== 0) {
  const replayFlags = `${flags.cluster ? ' --cluster' : ''}${flags['no-wait'] ? ' --no-wait' : ''}`;
  console.error(
    `\nchaos run failed; replay it with: npm run test:chaos --${replayFlags} --duration ${options.duration} --seed ${options.seed} --faults ${options.faults}`,
  );
}
process.exit(status);
