import { Injectable, Module } from '@nestjs/common';
import { BatchError, CoordinatorConsumerProperties, CoordinatorModule, type StreamMessage, StreamListener } from '@redis-stream-coordinator/nestjs';

interface Order {
  customer: string;
  cents: number;
}

@Injectable()
export class OrderHandlers {
  readonly charged: string[] = [];
  readonly rows: number[] = [];

  // 16 lanes per shard: orders of different customers (routing keys) are charged side by side,
  // the orders of one customer one after the other, in order.
  @StreamListener({ streamPrefix: 'orders', consumerGroup: 'billing', lanes: 16, shardCount: 4 })
  async charge(message: StreamMessage<Order>) {
    await new Promise((resolve) => setTimeout(resolve, 5)); // the payment provider's round trip
    this.charged.push(`${message.key}:${message.payload.cents}`);
  }

  // Up to 100 entries of one shard per call, in order, acknowledged together.
  @StreamListener({ streamPrefix: 'orders', consumerGroup: 'warehouse', batch: { maxSize: 100, maxWaitMs: 50 }, shardCount: 4 })
  async insertRows(messages: StreamMessage<Order>[]) {
    for (const [i, message] of messages.entries()) {
      // Rows before i are kept and acknowledged; i and the rest are retried.
      if (message.payload.cents < 0) throw new BatchError(i, new RangeError(`negative amount in ${message.id}`));
      this.rows.push(message.payload.cents);
    }
  }
}

/** Hands each order on and acknowledges it when its e-mail went out. */
@Injectable()
export class ReceiptMailer {
  readonly sent: string[] = [];

  enqueue(message: StreamMessage<Order>) {
    setTimeout(() => {
      this.sent.push(message.payload.customer);
      void message.ack(); // the customer's next order waits until here
    }, 1);
  }
}

@Module({
  imports: [CoordinatorModule.forRoot({ redis: { url: process.env.REDIS_URL } })],
  providers: [
    OrderHandlers,
    ReceiptMailer,
    {
      provide: 'receiptConsumer',
      inject: [ReceiptMailer],
      useFactory: (mailer: ReceiptMailer) =>
        CoordinatorConsumerProperties.consumer<Order>({
          streamPrefix: 'orders',
          consumerGroup: 'receipts',
          lanes: 8,
          ackMode: 'manual',
          ackTimeoutMs: 10_000,
          handler: (message) => mailer.enqueue(message),
        }),
    },
  ],
})
export class AppModule {}
