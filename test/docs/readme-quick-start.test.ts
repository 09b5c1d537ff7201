import 'reflect-metadata';
import fs from 'node:fs';
import path from 'node:path';
import { Test } from '@nestjs/testing';
import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, StreamPublisher } from '@redis-stream-coordinator/nestjs';
import { pollUntil } from '../support/poll';
import { useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const EXAMPLE = path.join(__dirname, '../examples/quick-start.ts');

describe('the README quick start', () => {
  it('is the example file, word for word', () => {
    const readme = fs.readFileSync(path.join(__dirname, '../../README.md'), 'utf8');
    const block = /<!-- quick-start: test\/examples\/quick-start\.ts -->\n```ts\n([\s\S]*?)```/.exec(readme);
    expect(block, 'README.md has the quick-start block').not.toBeNull();
    expect(block![1]).toBe(fs.readFileSync(EXAMPLE, 'utf8'));
  });

  it('runs: the listener and the bean consumer each get every published summary', async () => {
    process.env.REDIS_URL = redis.server.url;
    const { AppModule, AuditService, SummaryHandlers } = await import('../examples/quick-start');
    const app = await Test.createTestingModule({ imports: [AppModule] }).compile();
    await app.init();
    try {
      const admin = app.get(CoordinatorAdmin);
      await pollUntil('both groups STABLE', async () => {
        const groups = await Promise.all(
          ['summary-group', 'audit-group'].map((group) => admin.describeGroup('summary', group).catch(() => undefined)),
        );
        return groups.every((g) => g?.group.state === 'STABLE' && g.shards.every((s) => s.state === 'OWNED')) && groups;
      });
      await app.get(StreamPublisher).publish('summary', { key: 'user-42', payload: { userId: 'user-42', text: 'hi' } });
      await pollUntil(
        'the summary handled by both',
        async () => app.get(SummaryHandlers).summarized.length === 1 && app.get(AuditService).audited.length === 1,
      );
      expect(app.get(SummaryHandlers).summarized).toEqual(['user-42: hi']);
      const members = (await admin.describeGroup('summary', 'summary-group')).members;
      expect(members.map((m) => m.memberId.slice(-3)).sort()).toEqual(['-m0', '-m1', '-m2', '-m3']);
    } finally {
      await app.close();
    }
  });
});
