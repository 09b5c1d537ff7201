import { Injectable, Module } from '@nestjs/common';
import { CoordinatorAdmin, CoordinatorModule, StreamListener, type StreamMessage } from '@redis-stream-coordinator/nestjs';

@Injectable()
export class Shipping {
  readonly knownCarriers = new Set(['ups']);
  readonly shipped: string[] = [];

  @StreamListener({ streamPrefix: 'shipments', consumerGroup: 'shipping', shardCount: 2, maxAttempts: 1 })
  onShipment(message: StreamMessage<{ carrier: string }>) {
    if (!this.knownCarriers.has(message.payload.carrier)) throw new Error(`unknown carrier ${message.payload.carrier}`);
    this.shipped.push(`${message.key} by ${message.payload.carrier}`);
  }
}

/** What an operator does once the cause is fixed (the same as `rsc dead-letters <prefix> <group> list|replay|purge`). */
@Injectable()
export class ShipmentDeadLetters {
  constructor(private readonly admin: CoordinatorAdmin) {}

  /** What failed and why: `ref` names each letter. */
  list() {
    return this.admin.readDeadLetters('shipments', 'shipping', { errorContains: 'unknown carrier' });
  }

  /** Writes each entry again to its key (after the key's newer entries); every group of the stream gets it. */
  replay(ref: string) {
    return this.admin.replayDeadLetter('shipments', 'shipping', ref);
  }

  /** An entry no one should handle: delete its dead letter. */
  purge(ref: string) {
    return this.admin.purgeDeadLetter('shipments', 'shipping', ref);
  }
}

@Module({
  imports: [CoordinatorModule.forRootAsync({ useFactory: () => ({ redis: { url: process.env.REDIS_URL } }) })],
  providers: [Shipping, ShipmentDeadLetters],
})
export class ShippingModule {}
