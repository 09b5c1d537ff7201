import { Injectable, Module } from '@nestjs/common';
import { z } from 'zod';
import { CoordinatorConsumerProperties, CoordinatorModule, type StreamMessage, StreamListener, StreamPublisher } from '@redis-stream-coordinator/nestjs';

const Shipment = z.object({ shipmentId: z.string(), label: z.instanceof(Uint8Array) });
const POD = process.env.POD_NAME ?? 'local';

@Injectable()
export class ShipmentHandlers {
  readonly labels = new Map<string, number>();

  // Members shipments-<pod>-m0 and -m1: a restarted pod gets their shards back without a rebalance.
  @StreamListener({ streamPrefix: 'shipment', consumerGroup: 'labels', concurrency: 2, shardCount: 4, memberInstanceId: `shipments-${POD}`, schema: Shipment })
  async onShipment(message: StreamMessage<z.infer<typeof Shipment>>) {
    this.labels.set(message.payload.shipmentId, message.payload.label.byteLength);
  }
}

@Injectable()
export class ShipmentDesk {
  constructor(private readonly publisher: StreamPublisher) {}

  // Written with the module's publisher.codec, msgpack: the label's bytes arrive as bytes.
  ship(shipmentId: string, label: Uint8Array) {
    return this.publisher.publish('shipment', { key: shipmentId, payload: { shipmentId, label } });
  }

  // This call's own codec: JSON, for the carrier's consumer written in another language.
  notifyCarrier(shipmentId: string) {
    return this.publisher.publish('carrier-notices', { key: shipmentId, payload: { shipmentId } }, { codec: 'json' });
  }
}

@Injectable()
export class AuditLog {
  readonly seen: unknown[] = [];
}

@Module({
  imports: [CoordinatorModule.forRoot({ redis: { url: process.env.REDIS_URL }, publisher: { codec: 'msgpack' } })],
  providers: [
    ShipmentHandlers,
    ShipmentDesk,
    AuditLog,
    {
      provide: 'shipmentAudit',
      inject: [AuditLog],
      useFactory: (audit: AuditLog) =>
        CoordinatorConsumerProperties.consumer({
          streamPrefix: 'shipment', consumerGroup: 'audit', shardCount: 4,
          memberInstanceId: `audit-${POD}`,
          handler: (message) => void audit.seen.push(message.payload),
        }),
    },
  ],
})
export class AppModule {}
