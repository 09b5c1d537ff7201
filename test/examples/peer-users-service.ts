import { Controller, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Ctx, EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { CoordinatorModule, type StreamMessage, StreamPublisher } from '@redis-stream-coordinator/nestjs';
import { RedisStreamsContext, RedisStreamsServer, RedisStreamsServerModule } from '@redis-stream-coordinator/nestjs/microservices';
import { datesCodec } from './peer-dates-codec';

export interface NewUser { name: string; signedUpAt: Date }

@Controller()
export class UsersEventHandlers {
  readonly created: string[] = [];
  readonly updated: string[] = [];
  readonly imports: StreamMessage[] = [];

  constructor(private readonly publisher: StreamPublisher) {}

  // Was @RedisStreamHandler('users:create') returning [{ stream: 'users:created', payload }]: the reply
  // goes to the caller of send(); the event for other services is published, then the entry acknowledged.
  // 8 lanes: requests of different users (routing keys) run side by side, each user's in order.
  @MessagePattern('users-create', { lanes: 8 })
  async create(@Payload() user: NewUser, @Ctx() ctx: RedisStreamsContext) {
    const created = { id: ctx.getId(), name: user.name, signedUpAt: user.signedUpAt, tenant: ctx.getHeaders().tenant };
    await this.publisher.publish('users-created', { key: created.id, payload: created, headers: { tenant: created.tenant } });
    this.created.push(created.id);
    return { ...created, dateDecoded: user.signedUpAt instanceof Date };
  }

  // Was `return []` (acknowledge only): resolving acknowledges; throwing retries, then dead-letters.
  @EventPattern<string>('users-update')
  update(@Payload() update: { name: string }, @Ctx() ctx: RedisStreamsContext) {
    this.updated.push(`${update.name}@${ctx.getHeaders().tenant}`);
  }

  // Was `return null` (leave it pending): settled later with ack(); unsettled after ackTimeoutMs, retried, then
  // dead-lettered. Until then it holds its key's lane and a worker: 16 lanes let 16 keys wait at once.
  @EventPattern<string>('users-import', { ackMode: 'manual', ackTimeoutMs: 1000, maxAttempts: 2, lanes: 16 })
  import(@Ctx() ctx: RedisStreamsContext) {
    this.imports.push(ctx.getMessage());
  }

  async flushImports() {
    for (const message of this.imports.splice(0)) await message.ack();
  }
}

@Module({
  imports: [
    CoordinatorModule.forRoot({
      redis: { url: process.env.REDIS_URL },
      publisher: { codec: datesCodec }, // what StreamPublisher and the module's clients write with
      defaults: { shardCount: 4, codecs: [datesCodec] }, // what every member can decode
    }),
    RedisStreamsServerModule.forRoot({ consumerGroup: 'users' }),
  ],
  controllers: [UsersEventHandlers],
})
export class UsersModule {}

export async function bootstrap() {
  const app = await NestFactory.createMicroservice(UsersModule, {
    inject: [RedisStreamsServer],
    useFactory: (strategy: RedisStreamsServer) => ({ strategy }),
    logger: ['error', 'warn'],
  });
  await app.listen();
  return app;
}
