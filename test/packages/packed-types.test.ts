import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { findRoot } from '../support/repo-root';
import { describeTier, PACKAGING_TIER_SKIP } from '../support/tier';

/**
 * The packed packages' type declarations, as an application compiles them: `module: nodenext` and
 * `skipLibCheck: false`, with the required peers only. An optional peer the application did not
 * install (`@opentelemetry/api`, `msgpackr`, `@nestjs/microservices`, `@nestjs/terminus`) must not
 * be named by any declaration it reaches: once, `core/dist/telemetry/*.d.ts` failed such an app with
 * TS2307 `Cannot find module '@opentelemetry/api'`. The tarballs come from `npm pack` (what the
 * registry would serve); the required peers are the repository's own, linked, so that nothing is
 * downloaded (the compatibility matrix, scripts/compat-matrix.js, installs them from the registry).
 */
const root = findRoot(__dirname);
// Each compile checks every declaration it reaches (@types/node, Nest's): seconds alone, more beside the suite.
vi.setConfig({ testTimeout: 120_000 });
const OPTIONAL_PEERS = ['@opentelemetry/api', 'msgpackr', '@nestjs/microservices', '@nestjs/terminus'];
let work: string;
const tarballs = new Map<string, string>();

/**
 * A throwaway application: our packages unpacked into its node_modules, the given packages linked
 * from the repository's, the given sources, and a tsconfig under nodenext without skipLibCheck.
 */
function anApp(name: string, ours: string[], linked: string[], sources: Record<string, string>): string {
  const app = path.join(work, name);
  for (const pkg of ours) {
    const into = path.join(app, 'node_modules', pkg);
    fs.mkdirSync(into, { recursive: true });
    execFileSync('tar', ['-xzf', tarballs.get(pkg)!, '-C', into, '--strip-components=1']);
  }
  for (const pkg of linked) {
    const link = path.join(app, 'node_modules', pkg);
    fs.mkdirSync(path.dirname(link), { recursive: true });
    fs.symlinkSync(path.join(root, 'node_modules', pkg), link, 'dir');
  }
  fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name, private: true }));
  for (const [file, text] of Object.entries(sources)) fs.writeFileSync(path.join(app, file), text);
  // What the compatibility matrix's consumers compile with (skipLibCheck off), under nodenext.
  const consumer = JSON.parse(fs.readFileSync(path.join(root, 'scripts/consumer-compiler-options.json'), 'utf8'));
  const compilerOptions = { module: 'nodenext', moduleResolution: 'nodenext', ...consumer };
  fs.writeFileSync(path.join(app, 'tsconfig.json'), JSON.stringify({ compilerOptions, files: Object.keys(sources) }, null, 2));
  return app;
}

/** tsc's diagnostics for the app ('' when it compiles). */
function compile(app: string): string {
  try {
    execFileSync(path.join(root, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.json'], { cwd: app, encoding: 'utf8', stdio: 'pipe' });
    return '';
  } catch (error) {
    const { stdout, stderr } = error as { stdout?: string; stderr?: string };
    return `${stdout ?? ''}${stderr ?? ''}`.trim() || String(error);
  }
}

/** Whether `pkg` could be found from `app` (its node_modules or any folder above). */
function resolvable(app: string, pkg: string): boolean {
  for (let dir = app; ; dir = path.dirname(dir)) {
    if (fs.existsSync(path.join(dir, 'node_modules', pkg))) return true;
    if (path.dirname(dir) === dir) return false;
  }
}

const NEST_APP = `
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { CoordinatedMember, CoordinatorAdmin, StreamProducer, type StreamMessage } from '@redis-stream-coordinator/core';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import { CoordinatorModule, StreamListener, StreamPublisher } from '@redis-stream-coordinator/nestjs';
import { createDashboard } from '@redis-stream-coordinator/dashboard';
import { CoordinatorDashboardModule } from '@redis-stream-coordinator/dashboard/nest';

@Injectable()
export class Summaries {
  constructor(readonly publisher: StreamPublisher) {}
  @StreamListener({ streamPrefix: 'summary', consumerGroup: 'summary-group', concurrency: 2 })
  async onSummary(message: StreamMessage<{ text: string }>): Promise<void> {
    await this.publisher.publish('audit', { key: message.key, payload: message.payload.text });
  }
}

@Module({
  imports: [CoordinatorModule.forRoot({ redis: { url: process.env.REDIS_URL } }), CoordinatorDashboardModule.forRoot({ path: '/rsc' })],
  providers: [Summaries],
})
export class AppModule {}

export const used = [CoordinatedMember, CoordinatorAdmin, StreamProducer, RedisServer, createDashboard];
export const member = (redis: ConstructorParameters<typeof CoordinatedMember>[0]) =>
  new CoordinatedMember(redis, { streamPrefix: 'summary', consumerGroup: 'g', handler: (m) => m.payload }).options.memberName;
`;

const PLAIN_APP = `
import { CoordinatedMember, StreamProducer } from '@redis-stream-coordinator/core';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import { createDashboard } from '@redis-stream-coordinator/dashboard';

export async function start(): Promise<void> {
  const server = await RedisServer.start();
  const { Redis } = await import('ioredis');
  const redis = new Redis(server.url);
  const member = new CoordinatedMember<{ text: string }>(redis, { streamPrefix: 'summary', consumerGroup: 'g', shardCount: 2, handler: () => undefined });
  await member.start();
  await new StreamProducer(redis, { streamPrefix: 'summary' }).send({ key: 'k', payload: { text: 'hi' } });
  createDashboard({ redis, readOnly: true });
}
`;

describeTier(
  'the packed type declarations compile in an application without the optional peers (nodenext, skipLibCheck: false)',
  PACKAGING_TIER_SKIP,
  () => {
    beforeAll(() => {
      work = fs.mkdtempSync(path.join(os.tmpdir(), 'rsc-packed-types-'));
      const packages = ['core', 'nestjs', 'dashboard'];
      const packed = JSON.parse(
        execFileSync('npm', ['pack', '--json', '--pack-destination', work, ...packages.flatMap((p) => ['--workspace', `packages/${p}`])], {
          cwd: root,
          encoding: 'utf8',
          stdio: ['ignore', 'pipe', 'pipe'],
        }),
      ) as { name: string; filename: string }[];
      for (const { name, filename } of packed) tarballs.set(name, path.join(work, filename));
    }, 120_000);
    afterAll(() => {
      if (work) fs.rmSync(work, { recursive: true, force: true });
    });
    it('a Nest application of the starter and the dashboard, CommonJS and ESM', () => {
      const app = anApp(
        'nest-app',
        ['@redis-stream-coordinator/core', '@redis-stream-coordinator/nestjs', '@redis-stream-coordinator/dashboard'],
        ['@nestjs/common', '@nestjs/core', 'ioredis', 'reflect-metadata', 'rxjs', 'uuid', '@types/node'],
        { 'app.module.ts': NEST_APP, 'app.module.mts': NEST_APP },
      );
      expect(OPTIONAL_PEERS.filter((pkg) => resolvable(app, pkg))).toEqual([]);
      expect(compile(app)).toBe('');
    });

    it('an application of the core and the dashboard alone, without Nest', () => {
      const app = anApp(
        'plain-app',
        ['@redis-stream-coordinator/core', '@redis-stream-coordinator/dashboard'],
        ['ioredis', 'uuid', '@types/node'],
        { 'main.ts': PLAIN_APP, 'main.mts': PLAIN_APP },
      );
      expect([...OPTIONAL_PEERS, '@nestjs/common', '@redis-stream-coordinator/nestjs'].filter((pkg) => resolvable(app, pkg))).toEqual([]);
      expect(compile(app)).toBe('');
    });
  },
);
