import { describe, expect, it } from 'vitest';
import { WakeHub } from '../packages/core/src/redis/wake-hub';
import { pollUntil } from './support/poll';
import { uniqueName, useRedisServer } from './support/vitest-redis';

const redis = useRedisServer();

describe('WakeHub', () => {
  it('after its connection is killed it subscribes again itself, tells every listener at once (wake-ups were lost), and hears new ones', async () => {
    const base = redis.client();
    const channel = uniqueName('wake');
    const heard: string[] = [];
    const stop = await WakeHub.for(base).listen(channel, (publisher) => heard.push(publisher));
    const publisher = redis.client();
    await pollUntil('subscribed', async () => (await publisher.publish(channel, 'first')) === 1);
    await pollUntil('the first wake-up heard', async () => heard.includes('first'));

    await publisher.call('CLIENT', 'KILL', 'TYPE', 'pubsub');
    await pollUntil('the reconnect told the listener', async () => heard.includes(''));
    await pollUntil('subscribed again', async () => (await publisher.publish(channel, 'second')) === 1);
    await pollUntil('a wake-up after the reconnect heard', async () => heard.includes('second'));
    expect(heard.filter((p) => p !== '')).toEqual(['first', 'second']);
    await stop();
  });
});
