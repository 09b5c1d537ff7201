import { Controller, Inject, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Ctx, EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { CoordinatorClientProxy, RedisStreamsContext, RedisStreamsServer, StreamRecord } from '@redis-stream-coordinator/nestjs/microservices';
import { lastValueFrom } from 'rxjs';

export interface Order { id: string; customerId: string; total: number }

@Controller()
export class OrdersController {
  readonly handled: string[] = [];

  // Two members of the server's group ('billing') on the stream 'orders'.
  @EventPattern<string>('orders', { concurrency: 2, maxAttempts: 5 })
  onOrder(@Payload() order: Order, @Ctx() context: RedisStreamsContext) {
    this.handled.push(`${order.id} key=${context.getKey()} tenant=${context.getHeaders().tenant ?? '-'}`);
  }

  @MessagePattern('prices', { consumerGroup: 'pricing' })
  price(@Payload() query: { sku: string }) {
    return { sku: query.sku, price: query.sku.length * 10 }; // a value, a promise or an observable
  }
}

@Injectable()
export class Checkout {
  constructor(@Inject('BILLING') private readonly billing: CoordinatorClientProxy) {}

  async place(order: Order) {
    await lastValueFrom(this.billing.emit('orders', order)); // keyed by customerId (the `key` option)
    await lastValueFrom(this.billing.emit('orders', new StreamRecord(order, { key: order.id, headers: { tenant: 'acme' } })));
    return lastValueFrom(this.billing.send('prices', { sku: order.id })); // RequestTimeoutError after timeoutMs
  }
}

@Module({
  controllers: [OrdersController],
  providers: [
    Checkout,
    {
      provide: 'BILLING',
      useFactory: () =>
        new CoordinatorClientProxy({
          redis: { url: process.env.REDIS_URL },
          key: (order) => (order as Order).customerId,
          producer: { shardCount: 8 }, // creates the streams if a sender comes first
        }),
    },
  ],
})
export class AppModule {}

export async function bootstrap() {
  const app = await NestFactory.createMicroservice(AppModule, {
    strategy: new RedisStreamsServer({ redis: { url: process.env.REDIS_URL }, consumerGroup: 'billing', shardCount: 8 }),
    logger: ['error', 'warn'],
  });
  await app.listen();
  return app;
}
