#!/usr/bin/env node
/**
 * Compatibility matrix: packs the published packages (`npm pack`: core, nestjs, dashboard, cli),
 * installs the tarballs into a throwaway app per combination of `@nestjs/*` and `ioredis` majors
 * from the npm registry, and runs a smoke test there against a private redis-server: a
 * @StreamListener member receives what StreamPublisher wrote, StreamListenerRegistry lists it, (with
 * @nestjs/microservices installed) an @EventPattern member receives what CoordinatorClientProxy
 * emitted and a @MessagePattern answers send(), the dashboard's Nest module serves its overview on
 * the app's HTTP server, and the CLI (`node_modules/.bin/rsc`) describes the listener's group. It
 * also checks the tarballs (README, LICENSE, the internal dependencies as ranges) and, once, that
 * every entry point compiles for TypeScript under moduleResolution node10, node16 and bundler, with
 * skipLibCheck off.
 *
 * Not part of `npm test` (it installs from the registry: 5-15 s per combination with a warm npm
 * cache, the whole matrix about a minute). Usage:
 *   node scripts/compat-matrix.js                 # nest 10, 11, 12 × ioredis 5, 6
 *   node scripts/compat-matrix.js --short         # the corners: nest 10 + ioredis 5, nest 12 + ioredis 6
 *   node scripts/compat-matrix.js --nest 11 --ioredis 5 --keep
 * Exits non-zero if any combination fails; prints one result line per combination.
 */

const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const args = process.argv.slice(2);
const flag = (name) => args.includes(`--${name}`);
const list = (name, fallback) => {
  const index = args.indexOf(`--${name}`);
  return index >= 0 ? args[index + 1].split(',') : fallback;
};

const combos = flag('short')
  ? [
      { nest: '10', ioredis: '5' },
      { nest: '12', ioredis: '6' },
    ]
  : list('nest', ['10', '11', '12']).flatMap((nest) => list('ioredis', ['5', '6']).map((ioredis) => ({ nest, ioredis })));
const keep = flag('keep');
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rsc-compat-'));

function run(command, commandArgs, cwd, extra = {}) {
  return execFileSync(command, commandArgs, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], ...extra });
}

/** The packages packed, in build order, with the files each tarball must hold. */
const PACKAGES = {
  core: ['dist/index.js', 'dist/index.d.ts'],
  nestjs: ['dist/index.js', 'dist/index.d.ts'],
  cli: ['bin/rsc.js', 'dist/main.js'],
  dashboard: ['dist/index.js', 'dist/index.d.ts', 'assets/index.html'],
};

function pack() {
  for (const name of Object.keys(PACKAGES)) run('npm', ['run', 'build', '--silent', '--workspace', `packages/${name}`], root);
  const tarballs = {};
  for (const [name, required] of Object.entries(PACKAGES)) {
    const out = JSON.parse(run('npm', ['pack', '--json', '--pack-destination', work, '--workspace', `packages/${name}`], root));
    const files = out[0].files.map((f) => f.path);
    for (const file of ['README.md', 'LICENSE', 'package.json', ...required]) {
      if (!files.includes(file)) throw new Error(`the ${name} tarball lacks ${file}`);
    }
    tarballs[name] = path.join(work, out[0].filename);
    // One of our packages names another by a range, so that an application's copy of it is shared.
    const manifest = JSON.parse(fs.readFileSync(path.join(root, `packages/${name}/package.json`), 'utf8'));
    for (const [dependency, range] of Object.entries({ ...manifest.dependencies, ...manifest.peerDependencies })) {
      if (dependency.startsWith('@redis-stream-coordinator/') && !/^[\^~]/.test(range))
        throw new Error(`@redis-stream-coordinator/${name} depends on ${dependency} ${range}: publish it as a range`);
    }
  }
  return tarballs;
}

const SMOKE = String.raw`
'use strict';
require('reflect-metadata');
const { Controller, Injectable, Module } = require('@nestjs/common');
const { NestFactory } = require('@nestjs/core');
const { EventPattern, MessagePattern } = require('@nestjs/microservices');
const { RedisServer } = require('@redis-stream-coordinator/core/testing');
const { CoordinatorModule, StreamListener, StreamListenerRegistry, StreamPublisher } = require('@redis-stream-coordinator/nestjs');
const { CoordinatorClientProxy, RedisStreamsServer } = require('@redis-stream-coordinator/nestjs/microservices');
const { CoordinatorDashboardModule } = require('@redis-stream-coordinator/dashboard/nest');
const { execFileSync } = require('node:child_process');
const path = require('node:path');
const { lastValueFrom } = require('rxjs');

const decorate = (decorator, target, key) => Reflect.decorate([decorator], target, key, Object.getOwnPropertyDescriptor(target, key));
const listened = new Set();
const events = new Set();

class Listener { onSmoke(message) { listened.add(message.payload.n); } }
Injectable()(Listener);
decorate(StreamListener({ id: 'smoke', streamPrefix: 'smoke', consumerGroup: 'smoke-group', concurrency: 2 }), Listener.prototype, 'onSmoke');

class Events {
  onEvent(data) { events.add(data.n); }
  price(query) { return { sku: query.sku, price: query.sku.length }; }
}
Controller()(Events);
decorate(EventPattern('smoke-events'), Events.prototype, 'onEvent');
decorate(MessagePattern('smoke-prices'), Events.prototype, 'price');

async function until(what, probe) {
  const deadline = Date.now() + 30000;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error('timed out waiting for ' + what);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

(async () => {
  const redis = await RedisServer.start();
  let app, client, result;
  try {
    class AppModule {}
    Module({
      imports: [
        CoordinatorModule.forRoot({ redis: { url: redis.url }, coordinator: { heartbeatIntervalMs: 200 }, defaults: { shardCount: 2 } }),
        CoordinatorDashboardModule.forRoot({ path: '/rsc' }),
      ],
      providers: [Listener],
      controllers: [Events],
    })(AppModule);
    const strategy = new RedisStreamsServer({ redis: { url: redis.url }, coordinator: { heartbeatIntervalMs: 200 }, consumerGroup: 'smoke-service', shardCount: 2 });
    app = await NestFactory.create(AppModule, { logger: ['error'] });
    app.connectMicroservice({ strategy });
    await app.startAllMicroservices();
    await app.listen(0, '127.0.0.1');
    const listener = app.get(StreamListenerRegistry).get('smoke');
    if (!listener || listener.members().length !== 2) throw new Error('StreamListenerRegistry does not list the listener with 2 members');
    const members = [...listener.members(), ...strategy.unwrap().members];
    await until('every member joined (they create the streams)', () => members.every((member) => member.stats().joined));
    const publisher = app.get(StreamPublisher);
    for (let n = 0; n < 20; n++) await publisher.publish('smoke', { key: 'k' + (n % 4), payload: { n } });
    client = new CoordinatorClientProxy({ redis: { url: redis.url } });
    for (let n = 0; n < 10; n++) await lastValueFrom(client.emit('smoke-events', { n }));
    const price = await lastValueFrom(client.send('smoke-prices', { sku: 'ABCD' }));
    if (!price || price.price !== 4) throw new Error('send() answered ' + JSON.stringify(price));
    await until('20 entries at the @StreamListener', () => listened.size === 20);
    await until('10 events at the @EventPattern', () => events.size === 10);
    const { port } = app.getHttpServer().address();
    const overview = await (await fetch('http://127.0.0.1:' + port + '/rsc/api/overview')).json();
    const dashboard = (overview.streams || []).map((stream) => stream.streamPrefix).filter((name) => name === 'smoke').length;
    if (dashboard !== 1) throw new Error('the dashboard overview does not list the stream smoke: ' + JSON.stringify(overview).slice(0, 500));
    const rsc = path.join(__dirname, 'node_modules', '.bin', 'rsc');
    const described = JSON.parse(execFileSync(rsc, ['--url', redis.url, '--json', 'describe', 'smoke', 'smoke-group'], { encoding: 'utf8' }));
    const cli = described.members.filter((member) => member.state === 'ACTIVE').length;
    if (cli !== 2) throw new Error('rsc describe lists ' + cli + ' active members of smoke-group, not 2');
    result = { ok: true, listened: listened.size, events: events.size, reply: price, dashboard, cli };
  } finally {
    const closing = Date.now();
    await client?.close();
    await app?.close();
    await redis.stop();
    if (result) result.closeMs = Date.now() - closing;
  }
  process.stdout.write(JSON.stringify(result) + '\n');
  // Explicit: a member's stop leaves a shutdownTimeoutMs timer behind (reported), which would keep
  // the process alive 30 s more; a close that hangs is still caught by the timeout above.
  process.exit(0);
})().catch((error) => {
  process.stderr.write(String(error && error.stack || error) + '\n');
  process.exit(1);
});
`;

const TYPES_CONSUMER = `
import { CoordinatedMember, StreamProducer } from '@redis-stream-coordinator/core';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import { CoordinatorModule, StreamListener } from '@redis-stream-coordinator/nestjs';
import { CoordinatorClientProxy, RedisStreamsServer } from '@redis-stream-coordinator/nestjs/microservices';
import { createDashboard } from '@redis-stream-coordinator/dashboard';
import { CoordinatorDashboardModule } from '@redis-stream-coordinator/dashboard/nest';
export const used = [CoordinatedMember, StreamProducer, RedisServer, CoordinatorModule, StreamListener, CoordinatorClientProxy, RedisStreamsServer, createDashboard, CoordinatorDashboardModule];
export async function start(): Promise<string> { return (await RedisServer.start()).url; }
`;

/**
 * Each moduleResolution must resolve every entry point (a failure is a "Cannot find module" in the
 * consumer), and every declaration they reach must compile (skipLibCheck off; the app has no
 * @opentelemetry/api, an optional peer: test/packages/packed-types.test.ts checks the same in npm test).
 */
function checkTypes(app) {
  fs.writeFileSync(path.join(app, 'consumer.ts'), TYPES_CONSUMER);
  const settings = {
    node10: { module: 'commonjs', moduleResolution: 'node10' },
    node16: { module: 'node16', moduleResolution: 'node16' },
    bundler: { module: 'esnext', moduleResolution: 'bundler' },
  };
  const results = {};
  for (const [name, options] of Object.entries(settings)) {
    const config = {
      compilerOptions: {
        ...options,
        target: 'es2022',
        strict: true,
        noEmit: true,
        skipLibCheck: false,
        experimentalDecorators: true,
        types: ['node'],
      },
      files: ['consumer.ts'],
    };
    fs.writeFileSync(path.join(app, `tsconfig.${name}.json`), JSON.stringify(config, null, 2));
    try {
      run(path.join(app, 'node_modules/.bin/tsc'), ['-p', `tsconfig.${name}.json`], app);
      results[name] = 'ok';
    } catch (error) {
      results[name] = `FAILED: ${(error.stdout || error.message).trim().split('\n').slice(0, 3).join(' | ')}`;
    }
  }
  return results;
}

function runCombo({ nest, ioredis }, tarballs, withTypes) {
  const app = path.join(work, `nest${nest}-ioredis${ioredis}`);
  fs.mkdirSync(app);
  fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: `compat-nest${nest}-ioredis${ioredis}`, private: true }));
  const deps = [
    `@nestjs/common@^${nest}`,
    `@nestjs/core@^${nest}`,
    `@nestjs/microservices@^${nest}`,
    `@nestjs/platform-express@^${nest}`,
    `ioredis@^${ioredis}`,
    'reflect-metadata@^0.2',
    'rxjs@^7.8',
    ...Object.values(tarballs),
    ...(withTypes ? ['typescript@^5', '@types/node@^20'] : []),
  ];
  const started = Date.now();
  // Without --legacy-peer-deps: an ERESOLVE on our peer ranges is exactly what this matrix catches.
  run('npm', ['install', '--no-audit', '--no-fund', '--ignore-scripts', '--loglevel=error', ...deps], app, { timeout: 300_000 });
  const installed = (name) => JSON.parse(fs.readFileSync(path.join(app, 'node_modules', name, 'package.json'), 'utf8')).version;
  fs.writeFileSync(path.join(app, 'smoke.js'), SMOKE);
  const smoke = JSON.parse(run(process.execPath, ['smoke.js'], app, { timeout: 180_000 }).trim().split('\n').pop());
  return {
    versions: `@nestjs/core ${installed('@nestjs/core')}, @nestjs/microservices ${installed('@nestjs/microservices')}, ioredis ${installed('ioredis')}`,
    smoke,
    types: withTypes ? checkTypes(app) : undefined,
    seconds: Math.round((Date.now() - started) / 1000),
  };
}

function main() {
  console.log(`compat matrix on Node ${process.version}, work dir ${work}`);
  const tarballs = pack();
  console.log(
    `packed: ${Object.values(tarballs)
      .map((t) => path.basename(t))
      .join(', ')} (README, LICENSE present; internal dependencies are ranges)`,
  );
  let failed = 0;
  combos.forEach((combo, index) => {
    const label = `nest ^${combo.nest} + ioredis ^${combo.ioredis}`;
    try {
      const result = runCombo(combo, tarballs, index === 0);
      const typeProblems = result.types ? Object.entries(result.types).filter(([, v]) => v !== 'ok') : [];
      if (typeProblems.length > 0) failed += 1;
      console.log(
        `${typeProblems.length ? 'FAIL' : 'PASS'} ${label}: ${result.versions}; listener ${result.smoke.listened}/20, events ${result.smoke.events}/10, reply ${JSON.stringify(result.smoke.reply)}, dashboard ${result.smoke.dashboard}/1, rsc ${result.smoke.cli}/2 members, closed in ${result.smoke.closeMs} ms${result.types ? `; types ${JSON.stringify(result.types)}` : ''} (${result.seconds} s)`,
      );
    } catch (error) {
      failed += 1;
      const why = error.code === 'ETIMEDOUT' || error.signal ? `did not exit (${error.code || error.signal})` : `exit ${error.status}`;
      const detail = `${why}: ${String(error.stderr || error.stdout || error.message)
        .trim()
        .split('\n')
        .slice(-6)
        .join('\n    ')}`;
      console.log(`FAIL ${label}:\n    ${detail}`);
    }
  });
  if (!keep) fs.rmSync(work, { recursive: true, force: true });
  process.exit(failed ? 1 : 0);
}

main();
