import 'reflect-metadata';
import { Controller, Injectable, Module } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import { Test, type TestingModule } from '@nestjs/testing';
import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, type DeferredEvent } from '@redis-stream-coordinator/core';
import {
  CoordinatorConsumerProperties,
  CoordinatorModule,
  type MemberDefaults,
  StreamListener,
  StreamListenerRegistry,
  type StreamMessage,
} from '@redis-stream-coordinator/nestjs';
import { CoordinatorTesting } from '@redis-stream-coordinator/nestjs/testing';
import type { RedisStreamsServer } from '@redis-stream-coordinator/nestjs/microservices';
import { closedAfterEach, quietLogger } from '../support/nest-apps';
import { pollUntil } from '../support/poll';
import { useTransportApps } from '../support/transport-apps';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// docs/nestjs.md, Deferred retries: retryMode 'deferred' from a @StreamListener, a bean consumer,
// the module's defaults and the transport's handlers, each proven by a real deferral (the entry
// acknowledged, put in the group's schedule, run again when made due) on a private redis-server.

const redis = useRedisServer();
const apps = closedAfterEach<TestingModule>();
const { aMicroservice, aClient } = useTransportApps(redis);
const HOUR = 3_600_000;

/** An app with a listener (group "listener") and a bean consumer (group "bean"), each failing its first attempt of every entry. */
async function anApp(stream: string, levels: { defaults?: MemberDefaults; listener?: object; bean?: object }) {
  const attempts: string[] = [];
  const failFirst = (group: string, message: StreamMessage) => {
    attempts.push(`${group}:${message.deliveryCount}`);
    if (message.deliveryCount === 1) throw new Error(`${group} fails its first attempt`);
  };
  @Injectable()
  class Listener {
    @StreamListener({ streamPrefix: stream, consumerGroup: 'listener', shardCount: 1, ...levels.listener })
    on(message: StreamMessage) {
      failFirst('listener', message);
    }
  }
  @Module({
    imports: [
      CoordinatorModule.forRoot({
        redis: { url: redis.server.url },
        defaults: { retryBackoffMs: HOUR, retryBackoffMaxMs: HOUR, ...levels.defaults },
      }),
    ],
    providers: [
      Listener,
      {
        provide: 'bean',
        useFactory: () =>
          CoordinatorConsumerProperties.consumer({
            streamPrefix: stream,
            consumerGroup: 'bean',
            handler: (message: StreamMessage) => failFirst('bean', message),
            ...levels.bean,
          }),
      },
    ],
  })
  class AppModule {}
  const app = await Test.createTestingModule({ imports: [AppModule] })
    .setLogger(quietLogger)
    .compile();
  apps.push(app);
  const kit = CoordinatorTesting.attach(app);
  await app.init();
  await kit.ready();
  const modes = Object.fromEntries(
    app
      .get(StreamListenerRegistry)
      .getAll()
      .flatMap((container) => container.members())
      .map((member) => [member.options.consumerGroup, member.options.retryMode]),
  );
  return { app, kit, attempts, modes };
}

describe('retryMode in Nest', () => {
  it("the module's defaults.retryMode 'deferred' applies to a @StreamListener and a bean consumer: each failure waits in its group's schedule, the shard goes on", async () => {
    const stream = uniqueName('nest-deferred');
    const { kit, attempts, modes } = await anApp(stream, { defaults: { retryMode: 'deferred' } });
    expect(modes).toEqual({ listener: 'deferred', bean: 'deferred' });
    const sent = await kit.publish(stream, { key: 'k', payload: { n: 1 } });
    const admin = new CoordinatorAdmin(redis.client());
    await pollUntil('both groups deferred it', async () => {
      const [listener, bean] = await Promise.all([admin.describeGroup(stream, 'listener'), admin.describeGroup(stream, 'bean')]);
      return listener.group.deferred === 1 && bean.group.deferred === 1;
    });
    expect(attempts.sort()).toEqual(['bean:1', 'listener:1']);
    // Not handled while it waits (its acknowledgement was the deferral's).
    await expect(kit.handled({ group: 'listener' }, sent, { timeoutMs: 300 })).rejects.toThrow(/deferred, due at/);
    expect(await kit.releaseScheduled(stream)).toBe(2);
    await kit.handled({ group: 'listener' }, sent);
    await kit.handled({ group: 'bean' }, sent);
    expect(attempts.sort()).toEqual(['bean:1', 'bean:2', 'listener:1', 'listener:2']);
    await kit.drained();
    kit.detach();
  });

  it("a listener's and a bean's own retryMode win over the module's default, both ways", async () => {
    const stream = uniqueName('nest-own-mode');
    const { kit, attempts, modes } = await anApp(stream, {
      defaults: { retryMode: 'deferred' },
      listener: { retryMode: 'in-place', retryBackoffMs: 1 },
    });
    expect(modes).toEqual({ listener: 'in-place', bean: 'deferred' });
    const sent = await kit.publish(stream, { key: 'k', payload: { n: 1 } });
    await kit.handled({ group: 'listener' }, sent); // retried in place, at once
    await pollUntil(
      'the bean deferred it',
      async () => (await new CoordinatorAdmin(redis.client()).describeGroup(stream, 'bean')).group.deferred === 1,
    );
    expect(attempts.sort()).toEqual(['bean:1', 'listener:1', 'listener:2']);
    kit.detach();

    const other = uniqueName('nest-own-mode');
    const second = await anApp(other, { bean: { retryMode: 'deferred' } });
    expect(second.modes).toEqual({ listener: 'in-place', bean: 'deferred' });
    second.kit.detach();
  });

  it("a bad retryMode in the module's defaults is refused at startup, naming where it came from", async () => {
    await expect(anApp(uniqueName('nest-bad-mode'), { defaults: { retryMode: 'later' as never } })).rejects.toThrow(
      /retryMode must be 'in-place' or 'deferred', got "later" \(from CoordinatorModule defaults.retryMode\)/,
    );
  });
});

describe("retryMode in the transport's handlers", () => {
  it("an @EventPattern with extras { retryMode: 'deferred' }, and the server's own option, defer a failed event; made due, it runs again", async () => {
    const events = uniqueName('events');
    const audits = uniqueName('audits');
    const seen: string[] = [];
    @Controller()
    class Handlers {
      @EventPattern<string>(events, { consumerGroup: 'events', retryMode: 'deferred' })
      onEvent(@Payload() payload: { n: number }) {
        seen.push(`event ${payload.n}`);
        if (seen.filter((s) => s === `event ${payload.n}`).length === 1) throw new Error('first attempt fails');
      }

      @EventPattern<string>(audits)
      onAudit(@Payload() payload: { n: number }) {
        seen.push(`audit ${payload.n}`);
        if (seen.filter((s) => s === `audit ${payload.n}`).length === 1) throw new Error('first attempt fails');
      }
    }
    const { server, keyPrefix } = await aMicroservice([Handlers], {
      shardCount: 1,
      retryBackoffMs: HOUR,
      retryBackoffMaxMs: HOUR,
      streams: { [audits]: { retryMode: 'deferred' } },
    });
    const deferred: DeferredEvent[] = [];
    for (const member of server.unwrap<{ members: { on(event: 'deferred', listener: (e: DeferredEvent) => void): void }[] }>().members) {
      member.on('deferred', (event) => deferred.push(event));
    }
    const client = aClient(keyPrefix);
    await client.emit(events, { n: 1 }).toPromise();
    await client.emit(audits, { n: 2 }).toPromise();
    await pollUntil('both deferred', async () => deferred.length === 2);
    const admin = new CoordinatorAdmin(redis.client(), { keyPrefix });
    expect((await admin.describeGroup(events, 'events')).group.deferred).toBe(1);
    expect((await admin.describeGroup(audits, 'service')).group.deferred).toBe(1);
    expect(await admin.releaseAllScheduled({ streamPrefix: events, consumerGroup: 'events' })).toBe(1);
    expect(await admin.releaseAllScheduled({ streamPrefix: audits, consumerGroup: 'service' })).toBe(1);
    await pollUntil('both ran again', async () => seen.length === 4, { timeoutMs: 10_000 });
    expect(seen.sort()).toEqual(['audit 2', 'audit 2', 'event 1', 'event 1']);
    expect((server as RedisStreamsServer).stats().patterns.length).toBe(2);
  });
});
