import { Controller, Inject, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { CoordinatorModule, StreamListener, type StreamMessage, StreamPublisher } from '@redis-stream-coordinator/nestjs';
import { CoordinatorClientProxy, CoordinatorClientsModule, RedisStreamsServer, RedisStreamsServerModule } from '@redis-stream-coordinator/nestjs/microservices';
import { lastValueFrom } from 'rxjs';

export interface Order { id: string; customerId: string; total: number }

@Controller()
export class Billing {
  readonly charged: string[] = [];

  @EventPattern<string>('orders') // a member of the server's group, billing
  charge(@Payload() order: Order) {
    this.charged.push(order.id);
  }

  @MessagePattern('prices')
  price(@Payload() query: { sku: string }) {
    return { sku: query.sku, price: 42 };
  }
}

@Injectable()
export class Audit {
  readonly seen: string[] = [];

  @StreamListener({ streamPrefix: 'orders', consumerGroup: 'audit' }) // a second group on the same stream
  onOrder(message: StreamMessage<Order>) {
    this.seen.push(message.payload.id);
  }
}

@Injectable()
export class Checkout {
  constructor(private readonly publisher: StreamPublisher, @Inject('PRICES') private readonly prices: CoordinatorClientProxy) {}

  async place(order: Order) {
    await this.publisher.publish('orders', { key: order.customerId, payload: order });
    return lastValueFrom(this.prices.send('prices', { sku: order.id }));
  }
}

@Module({
  imports: [
    CoordinatorModule.forRoot({ redis: { url: process.env.REDIS_URL }, defaults: { shardCount: 8 } }),
    RedisStreamsServerModule.forRoot({ consumerGroup: 'billing' }),
    CoordinatorClientsModule.register([{ name: 'PRICES' }]),
  ],
  controllers: [Billing],
  providers: [Audit, Checkout],
})
export class AppModule {}

export async function bootstrap() {
  const app = await NestFactory.createMicroservice(AppModule, {
    inject: [RedisStreamsServer], // the server RedisStreamsServerModule built on the module's connection
    useFactory: (strategy: RedisStreamsServer) => ({ strategy }),
    logger: ['error', 'warn'],
  });
  await app.listen();
  return app;
}
