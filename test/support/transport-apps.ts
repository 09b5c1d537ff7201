import type { INestMicroservice } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { afterEach } from 'vitest';
import type { CoordinatedMember, DeadLetterEvent } from '@redis-stream-coordinator/core';
import { CoordinatorClientProxy, RedisStreamsServer } from '@redis-stream-coordinator/nestjs/microservices';
import { quietLogger } from './nest-apps';
import { pollUntil } from './poll';
import { type RedisFixture, uniqueName } from './vitest-redis';

type ServerOptions = ConstructorParameters<typeof RedisStreamsServer>[0];
type ClientOptions = ConstructorParameters<typeof CoordinatorClientProxy>[0];

/**
 * Nest microservices on RedisStreamsServer and CoordinatorClientProxy clients over the file's
 * private Redis, each under a key prefix of its own, closed after each test (pass or fail).
 */
export function useTransportApps(redis: RedisFixture) {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
  });

  /** A Nest microservice with RedisStreamsServer (fast heartbeats, 2 attempts, 2 shards unless told), listening, its members joined. */
  async function aMicroservice(
    controllers: unknown[],
    options: Partial<ServerOptions> = {},
    configure: (app: INestMicroservice) => void = () => undefined,
  ) {
    const keyPrefix = options.coordinator?.keyPrefix ?? uniqueName('ms');
    const server = new RedisStreamsServer({
      redis: { url: redis.server.url },
      consumerGroup: 'service',
      maxAttempts: 2,
      retryBackoffMs: 10,
      shardCount: 2,
      ...options,
      coordinator: { heartbeatIntervalMs: 200, ...options.coordinator, keyPrefix },
    });
    const module = await Test.createTestingModule({ controllers: controllers as never[] })
      .setLogger(quietLogger)
      .compile();
    const app: INestMicroservice = module.createNestMicroservice({ strategy: server, logger: quietLogger });
    cleanups.push(() => app.close());
    configure(app);
    await app.listen();
    await pollUntil('members joined', async () => server.stats().patterns.every((p) => p.members.every((m) => m.stats.joined)));
    return { app, server, keyPrefix };
  }

  function aClient(keyPrefix: string, options: Partial<ClientOptions> = {}) {
    const client = new CoordinatorClientProxy({ redis: { url: redis.server.url }, keyPrefix, ...options });
    cleanups.push(() => client.close());
    return client;
  }

  /** Every dead letter the server's members write from now on, as they report them. */
  function deadLettersOf(server: RedisStreamsServer): DeadLetterEvent[] {
    const deadLetters: DeadLetterEvent[] = [];
    for (const member of server.unwrap<{ members: CoordinatedMember[] }>().members) {
      member.on('dead-letter', (event) => deadLetters.push(event));
    }
    return deadLetters;
  }

  return { aMicroservice, aClient, deadLettersOf, cleanups };
}
