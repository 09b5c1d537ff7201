import { Controller, GatewayTimeoutException, Get, Inject, Injectable, Module, Param } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { CoordinatorModule, StreamListener, type StreamMessage } from '@redis-stream-coordinator/nestjs';
import { CoordinatorClientProxy, CoordinatorClientsModule, RequestTimeoutError, StreamRecord } from '@redis-stream-coordinator/nestjs/microservices';
import { lastValueFrom } from 'rxjs';
import { datesCodec } from './peer-dates-codec';

@Controller()
export class AppController {
  constructor(
    @Inject('USERS') private readonly users: CoordinatorClientProxy,
    @Inject('REPORTS') private readonly reports: CoordinatorClientProxy,
  ) {}

  // Was send('users:create', { data, ...headers }): the data, and headers beside it in a StreamRecord.
  @Get('send/:name')
  send(@Param('name') name: string) {
    const user = new StreamRecord({ name, signedUpAt: new Date() }, { key: name, headers: { tenant: 'acme' } });
    return lastValueFrom(this.users.send('users-create', user));
  }

  @Get('emit/:name')
  async emit(@Param('name') name: string) {
    await lastValueFrom(this.users.emit('users-update', new StreamRecord({ name }, { key: name, headers: { tenant: 'acme' } })));
    return 'Message Sent.';
  }

  // No service answers users-report: send() fails after the client's timeoutMs with RequestTimeoutError.
  @Get('report')
  report() {
    return lastValueFrom(this.reports.send('users-report', {})).catch((error: unknown) => {
      throw error instanceof RequestTimeoutError ? new GatewayTimeoutException(error.message) : error;
    });
  }
}

// Was responseStreams: ['users:created'] with consumerGroup 'api': a listener of the stream, in its group.
@Injectable()
export class UsersCreatedListener {
  readonly seen: string[] = [];

  @StreamListener({ streamPrefix: 'users-created', consumerGroup: 'api' })
  onCreated(message: StreamMessage<{ id: string; signedUpAt: Date }>) {
    if (message.payload.signedUpAt instanceof Date) this.seen.push(message.payload.id);
  }
}

@Module({
  imports: [
    CoordinatorModule.forRoot({ redis: { url: process.env.REDIS_URL }, publisher: { codec: datesCodec }, defaults: { shardCount: 4, codecs: [datesCodec] } }),
    CoordinatorClientsModule.register([{ name: 'USERS', timeoutMs: 5000 }, { name: 'REPORTS', timeoutMs: 300 }]),
  ],
  controllers: [AppController],
  providers: [UsersCreatedListener],
})
export class AppModule {}

export async function bootstrap() {
  const app = await NestFactory.create(AppModule, { logger: ['error', 'warn'] });
  await app.listen(Number(process.env.PORT ?? 3000));
  return app;
}
