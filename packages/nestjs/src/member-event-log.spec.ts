import { EventEmitter } from 'node:events';
import type { Logger } from '@nestjs/common';
import type { CoordinatedMember, DeadLetterEvent } from '@redis-stream-coordinator/core';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { EVENT_LOG_WINDOW_MS, MAX_EVENT_LINES_PER_WINDOW, MemberEventLog } from './member-event-log';

function aLogger() {
  const lines: { level: 'log' | 'warn'; line: string }[] = [];
  const logger = {
    log: (line: string) => lines.push({ level: 'log', line }),
    warn: (line: string) => lines.push({ level: 'warn', line }),
  } as unknown as Logger;
  return { lines, logger };
}

/** A member as the log sees it: its id, stream and group, and its events. */
function aMember(memberId = 'a-m0'): CoordinatedMember {
  return Object.assign(new EventEmitter(), {
    memberId,
    options: { streamPrefix: 'summary', consumerGroup: 'summary-group' },
  }) as unknown as CoordinatedMember;
}

const aDeadLetter = (i: number): DeadLetterEvent => ({
  shardIndex: 3,
  id: `1-${i}`,
  reason: 'Error: bad\n    at handler (x.ts:1)',
  attempts: 3,
  cause: 'attempts-exhausted',
  deadLetterId: `2-${i}`,
  destination: 'summary-group',
});

afterEach(() => {
  vi.useRealTimers();
});

describe('MemberEventLog: one line per event, a bounded number of lines under a storm', () => {
  it('rebalances are log lines with the shards (ranges folded) and epoch; dead letters, fences and lost leases are warnings', () => {
    const { lines, logger } = aLogger();
    const member = aMember();
    new MemberEventLog(logger).watch(member, '@StreamListener on A.b');
    member.emit('assigned', { shards: [0, 1, 2, 3, 7], memberEpoch: 4 });
    member.emit('revoked', { shards: [7], memberEpoch: 4 });
    member.emit('dead-letter', aDeadLetter(1));
    member.emit('fenced', { errorCode: 'FENCED_MEMBER_EPOCH', message: 'x', shards: [0, 1], memberEpoch: 5 });
    member.emit('lease-lost', { shards: [2], memberEpoch: 5, sinceLastHeartbeatMs: 15_000 });
    expect(lines).toEqual([
      { level: 'log', line: 'member a-m0 (@StreamListener on A.b) was assigned shards 0-3, 7 of summary/summary-group (memberEpoch 4)' },
      { level: 'log', line: 'member a-m0 (@StreamListener on A.b) gave up shard 7 of summary/summary-group (memberEpoch 4)' },
      {
        level: 'warn',
        line: 'member a-m0 (@StreamListener on A.b) dead-lettered entry 1-1 of shard 3 of summary/summary-group (attempts-exhausted after 3 attempt(s)): Error: bad at handler (x.ts:1) (rsc dead-letters summary summary-group list)',
      },
      { level: 'warn', line: 'member a-m0 (@StreamListener on A.b) was fenced (FENCED_MEMBER_EPOCH) and dropped shards 0-1; it rejoins' },
      {
        level: 'warn',
        line: 'member a-m0 (@StreamListener on A.b) lost its lease: no heartbeat got through for 15000 ms, it stopped reading shard 2; it rejoins when Redis answers',
      },
    ]);
  });

  it('a storm: MAX_EVENT_LINES_PER_WINDOW lines of a kind per window, the rest counted in one summary line when the window ends', () => {
    vi.useFakeTimers();
    const { lines, logger } = aLogger();
    const member = aMember();
    const log = new MemberEventLog(logger, () => Date.now());
    log.watch(member, 'bean audit');
    for (let i = 0; i < 1000; i++) member.emit('dead-letter', aDeadLetter(i));
    member.emit('assigned', { shards: [1], memberEpoch: 2 });
    // Another kind still has its own lines.
    expect(lines).toHaveLength(MAX_EVENT_LINES_PER_WINDOW + 1);
    vi.advanceTimersByTime(EVENT_LOG_WINDOW_MS);
    expect(lines).toHaveLength(MAX_EVENT_LINES_PER_WINDOW + 2);
    expect(lines.at(-1)).toEqual({
      level: 'warn',
      line: `${1000 - MAX_EVENT_LINES_PER_WINDOW} more member event(s) in the last 10 s were not logged (dead letters ${1000 - MAX_EVENT_LINES_PER_WINDOW}; at most ${MAX_EVENT_LINES_PER_WINDOW} lines of each kind per 10 s): rsc events and rsc dead-letters show them all`,
    });
    // A new window: lines again.
    member.emit('dead-letter', aDeadLetter(1001));
    expect(lines).toHaveLength(MAX_EVENT_LINES_PER_WINDOW + 3);
  });

  it('a long shard list names MAX_LISTED_SHARDS indices and how many more; a long error is cut', () => {
    const { lines, logger } = aLogger();
    const member = aMember();
    new MemberEventLog(logger).watch(member, 'bean audit');
    member.emit('assigned', { shards: Array.from({ length: 1000 }, (_, i) => i * 2), memberEpoch: 1 });
    member.emit('dead-letter', { ...aDeadLetter(1), reason: 'x'.repeat(10_000) });
    expect(lines[0].line).toMatch(/was assigned shards 0, 2, 4, .*, 62 and 968 more of summary/);
    expect(lines[1].line.length).toBeLessThan(400);
  });

  it('close() writes what the window left out at once (the application is shutting down)', () => {
    const { lines, logger } = aLogger();
    const member = aMember();
    const log = new MemberEventLog(logger);
    log.watch(member, 'bean audit');
    for (let i = 0; i < MAX_EVENT_LINES_PER_WINDOW + 5; i++) member.emit('revoked', { shards: [i], memberEpoch: i });
    log.close();
    expect(lines.at(-1)?.line).toMatch(/^5 more member event\(s\) in the last \d+ s were not logged \(shards given up 5;/);
  });
});
