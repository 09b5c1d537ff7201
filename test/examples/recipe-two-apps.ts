import { Injectable, Module } from '@nestjs/common';
import { CoordinatorModule, StreamListener, type StreamMessage } from '@redis-stream-coordinator/nestjs';

// Two applications on one Redis, each with its own key prefix: same stream and group names, no
// shared key. (Two applications that should read the SAME stream share the prefix and use a group each.)
@Injectable()
export class ShopOrders {
  readonly seen: string[] = [];

  @StreamListener({ streamPrefix: 'orders', consumerGroup: 'billing', shardCount: 2 })
  onOrder(message: StreamMessage<{ sku: string }>) {
    this.seen.push(message.payload.sku);
  }
}

@Injectable()
export class TicketOrders {
  readonly seen: string[] = [];

  @StreamListener({ streamPrefix: 'orders', consumerGroup: 'billing', shardCount: 2 })
  onOrder(message: StreamMessage<{ sku: string }>) {
    this.seen.push(message.payload.sku);
  }
}

const redis = () => ({ url: process.env.REDIS_URL });

@Module({
  imports: [CoordinatorModule.forRootAsync({ useFactory: () => ({ redis: redis(), coordinator: { keyPrefix: 'shop' } }) })],
  providers: [ShopOrders],
})
export class ShopModule {}

@Module({
  imports: [CoordinatorModule.forRootAsync({ useFactory: () => ({ redis: redis(), coordinator: { keyPrefix: 'tickets' } }) })],
  providers: [TicketOrders],
})
export class TicketsModule {}
