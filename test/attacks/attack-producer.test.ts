import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder, PartialBatchError, StreamProducer } from '@redis-stream-coordinator/core';
import { TcpProxy } from '../support/tcp-proxy';
import { proxyFactory } from '../support/proxy-fixture';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// Attack on SPEC 9.5: "a batch reports per entry which writes landed, so a retry
// neither duplicates nor reorders a key". With an ioredis client on its defaults
// (autoResendUnfulfilledCommands true, maxRetriesPerRequest 20) the library never sees a lost reply:
// ioredis resends the script after it reconnects. Before the shard's write log, the script ran a
// second time (the stream held 0,1,2,1,2) and the caller was told "written" with the second copies'
// ids only; now the resend is answered from the log.
const redis = useRedisServer();
const keys = new KeyBuilder();
const aProxy = proxyFactory(redis);

describe('attack: producer write whose reply is lost', () => {
  it('a lost appendEntries reply that the client sends again is answered from the shard write log: written once, ids reported', async () => {
    const streamPrefix = uniqueName('attack-resend');
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 1 });
    const proxy = await aProxy();
    // A client as an application makes it: ioredis defaults.
    const producer = new StreamProducer(redis.clientAt(proxy.url, { maxRetriesPerRequest: 20 }), { streamPrefix });
    await producer.send({ key: 'k', payload: { seq: 0 } }); // routing read and scripts loaded

    const dropped = proxy.dropNextReply(TcpProxy.command('EVALSHA'));
    let outcome: unknown;
    try {
      outcome = await producer.sendBatch([
        { key: 'k', payload: { seq: 1 } },
        { key: 'k', payload: { seq: 2 } },
      ]);
    } catch (error) {
      outcome = error;
    }
    await dropped;

    const entries = await redis.client().xrange(keys.shardStream(streamPrefix, 0), '-', '+');
    const seqs = entries.map(([, fields]) => (JSON.parse(fields[fields.indexOf('p') + 1]) as { seq: number }).seq);
    // What a consumer of key k runs, in order. The promise: each entry once, or (if the caller was
    // told the write may have landed) a retry the caller controls.
    const told = outcome instanceof PartialBatchError ? outcome.failed.map((f) => f.maybeWritten) : 'written';
    expect({ seqs, told }).toEqual({ seqs: [0, 1, 2], told: 'written' });
  });
});
