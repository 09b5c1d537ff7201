// The app of test/examples/transport-module.ts on Nest's own Kafka transport, for docs/nestjs.md's
// line count: compiled by the typecheck, never run (there is no Kafka broker here).
import { Controller, Inject, Injectable, Module, type OnModuleInit } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { type ClientKafka, ClientsModule, EventPattern, MessagePattern, type MicroserviceOptions, Payload, ServerKafka, Transport } from '@nestjs/microservices';
import { lastValueFrom } from 'rxjs';

export interface Order { id: string; customerId: string; total: number }

const brokers = [process.env.KAFKA_BROKER ?? 'localhost:9092'];
const AUDIT = Symbol('audit'); // a second consumer group is a second server, with handlers of its own

@Controller()
export class Billing {
  readonly charged: string[] = [];

  @EventPattern('orders', Transport.KAFKA)
  charge(@Payload() order: Order) {
    this.charged.push(order.id);
  }

  @MessagePattern('prices', Transport.KAFKA)
  price(@Payload() query: { sku: string }) {
    return { sku: query.sku, price: 42 };
  }
}

@Controller()
export class Audit {
  readonly seen: string[] = [];

  @EventPattern('orders', AUDIT)
  onOrder(@Payload() order: Order) {
    this.seen.push(order.id);
  }
}

@Injectable()
export class Checkout implements OnModuleInit {
  constructor(@Inject('KAFKA') private readonly kafka: ClientKafka) {}

  async onModuleInit() {
    this.kafka.subscribeToResponseOf('prices'); // replies come on the topic prices.reply
    await this.kafka.connect();
  }

  async place(order: Order) {
    await lastValueFrom(this.kafka.emit('orders', { key: order.customerId, value: order }));
    return lastValueFrom(this.kafka.send('prices', { sku: order.id }));
  }
}

@Module({
  imports: [
    ClientsModule.register([
      { name: 'KAFKA', transport: Transport.KAFKA, options: { client: { clientId: 'checkout', brokers }, consumer: { groupId: 'checkout' } } },
    ]),
  ],
  controllers: [Billing, Audit],
  providers: [Checkout],
})
export class AppModule {}

export async function bootstrap() {
  // Two consumer groups are two Kafka servers: a hybrid application connects both.
  const app = await NestFactory.create(AppModule, { logger: ['error', 'warn'] });
  app.connectMicroservice<MicroserviceOptions>({ transport: Transport.KAFKA, options: { client: { brokers }, consumer: { groupId: 'billing' } } });
  const audit = new ServerKafka({ client: { brokers }, consumer: { groupId: 'audit' } });
  audit.setTransportId(AUDIT);
  app.connectMicroservice({ strategy: audit });
  await app.startAllMicroservices();
  await app.init();
  return app;
}
