/**
 * A member in a process of its own, for fault-injection tests (test/reliability): started by a
 * driver with its settings in the RSC_MEMBER_PROCESS environment variable (JSON), it runs a real
 * `CoordinatedMember` and appends every handler start and end, acknowledgement and ownership change
 * to a record file, one JSON line per `write` call, so that whatever returned before a SIGKILL is
 * in the file. SIGTERM stops it gracefully (drain, acknowledge, leave). It prints "ready" when joined.
 *
 * Record lines: { e: 'start' | 'end', t, m, ep, s, id, k, q, dc }, { e: 'ack', t, m, s, ge, ids, ok },
 * { e: 'assigned' | 'revoked' | 'fenced' | 'lease-lost', t, m, shards }, { e: 'error', t, m, msg }.
 * `t` is wall-clock milliseconds with microsecond precision (comparable across processes on a host).
 */
import fs from 'node:fs';
import { Redis } from 'ioredis';
import { CoordinatedMember } from '../member/coordinated-member';

export interface MemberProcessSettings {
  url: string;
  streamPrefix: string;
  consumerGroup: string;
  memberId: string;
  recordFile: string;
  sessionTimeoutMs: number;
  heartbeatIntervalMs: number;
  runtimeMaxConcurrency: number;
  /** How long each handler call takes (a timer). */
  handlerDelayMs: number;
}

export const MEMBER_PROCESS_ENV = 'RSC_MEMBER_PROCESS';

function main(): void {
  const settings = JSON.parse(process.env[MEMBER_PROCESS_ENV] ?? '') as MemberProcessSettings;
  const fd = fs.openSync(settings.recordFile, 'a');
  const now = () => performance.timeOrigin + performance.now();
  const record = (line: Record<string, unknown>) => fs.writeSync(fd, `${JSON.stringify({ t: now(), m: settings.memberId, ...line })}\n`);

  const redis = new Redis(settings.url, { maxRetriesPerRequest: 1, retryStrategy: () => 50 });
  redis.on('error', () => undefined);
  const member = new CoordinatedMember<{ seq: number }>(redis, {
    streamPrefix: settings.streamPrefix,
    consumerGroup: settings.consumerGroup,
    memberId: settings.memberId,
    sessionTimeoutMs: settings.sessionTimeoutMs,
    runtimeMaxConcurrency: settings.runtimeMaxConcurrency,
    blockMs: 500,
    sweepIntervalMs: 500,
    coordinator: { heartbeatIntervalMs: settings.heartbeatIntervalMs },
    handler: async (message) => {
      const base = { ep: member.currentMemberEpoch(), s: message.shardIndex, id: message.id, k: message.key, q: message.payload.seq, dc: message.deliveryCount };
      record({ e: 'start', ...base });
      await new Promise((resolve) => setTimeout(resolve, settings.handlerDelayMs));
      record({ e: 'end', ...base });
    },
  });
  member.on('acknowledged', (a) => record({ e: 'ack', s: a.shardIndex, ge: a.grantEpoch, ids: a.ids, ok: a.accepted }));
  member.on('assigned', (a) => record({ e: 'assigned', shards: a.shards, ep: a.memberEpoch }));
  member.on('revoked', (a) => record({ e: 'revoked', shards: a.shards, ep: a.memberEpoch }));
  member.on('fenced', (a) => record({ e: 'fenced', shards: a.shards, ep: a.memberEpoch, msg: a.message }));
  member.on('lease-lost', (a) => record({ e: 'lease-lost', shards: a.shards, ep: a.memberEpoch }));
  member.on('error', (error) => record({ e: 'error', msg: error.message }));

  process.on('SIGTERM', () => {
    void member.stop().finally(() => {
      record({ e: 'stopped' });
      redis.disconnect();
      process.exit(0);
    });
  });
  member.start().then(
    () => process.stdout.write('ready\n'),
    (error: Error) => record({ e: 'error', msg: `start: ${error.message}` }),
  );
}

if (require.main === module) main();
