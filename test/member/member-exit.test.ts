import { spawn } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const core = path.resolve(__dirname, '../../packages/core/dist/index.js');

describe('a process that stops its members', () => {
  it('exits once they have stopped: no timer of theirs (shutdownTimeoutMs, call deadlines) keeps it alive', async () => {
    // shutdownTimeoutMs is far longer than this test may take: before, stop() left its timer running.
    const script = `
      const { Redis } = require('ioredis');
      const { CoordinatedMember } = require(${JSON.stringify(core)});
      (async () => {
        const redis = new Redis(process.env.URL);
        const member = new CoordinatedMember(redis, { streamPrefix: process.env.PREFIX, consumerGroup: 'group',
          shardCount: 2, shutdownTimeoutMs: 600000, handler: () => undefined });
        await member.start();
        await member.stop();
        redis.disconnect();
        console.log('stopped');
      })().catch((error) => { console.error(error); process.exit(1); });`;
    const child = spawn(process.execPath, ['-e', script], {
      cwd: path.resolve(__dirname, '../..'),
      env: { ...process.env, URL: redis.server.url, PREFIX: uniqueName('exit') },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    try {
      await pollUntil('the process exited on its own', async () => child.exitCode !== null, { timeoutMs: 20_000 });
    } finally {
      child.kill('SIGKILL');
    }
    expect({ code: child.exitCode, output: output.trim() }).toEqual({ code: 0, output: 'stopped' });
  });
});
