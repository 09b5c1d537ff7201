import { Injectable, Module } from '@nestjs/common';
import { CoordinatorModule, StreamListener, type StreamMessage } from '@redis-stream-coordinator/nestjs';

export interface Order {
  orderId: string;
  cents: number;
}

@Injectable()
export class BillingHandlers {
  readonly charged: string[] = [];

  // Three attempts (10 ms, then 20 ms apart), then the order goes to the group's dead-letter stream.
  @StreamListener({ streamPrefix: 'orders', consumerGroup: 'billing', shardCount: 4, maxAttempts: 3, retryBackoffMs: 10 })
  async charge(message: StreamMessage<Order>) {
    if (message.payload.cents < 0) throw new RangeError(`order ${message.payload.orderId}: negative amount`);
    this.charged.push(message.payload.orderId);
  }
}

@Module({
  // Read when the module is compiled, so a test can point it at its own Redis first.
  imports: [CoordinatorModule.forRootAsync({ useFactory: () => ({ redis: { url: process.env.REDIS_URL } }) })],
  providers: [BillingHandlers],
})
export class BillingModule {}
