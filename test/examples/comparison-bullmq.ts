// @ts-nocheck: @nestjs/bullmq is not a dependency of this repository. The app of
// test/examples/transport-module.ts on @nestjs/bullmq, for docs/nestjs.md's line count: never run.
import { BullModule, InjectQueue, Processor, WorkerHost } from '@nestjs/bullmq';
import { Injectable, Module, type OnModuleDestroy } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { type Job, type Queue, QueueEvents } from 'bullmq';

export interface Order { id: string; customerId: string; total: number }

const connection = { host: process.env.REDIS_HOST, port: Number(process.env.REDIS_PORT) };

@Processor('billing') // no consumer groups: a queue per consumer, and each publish is one add per queue
export class Billing extends WorkerHost {
  readonly charged: string[] = [];

  async process(job: Job<Order>) {
    this.charged.push(job.data.id);
  }
}

@Processor('audit')
export class Audit extends WorkerHost {
  readonly seen: string[] = [];

  async process(job: Job<Order>) {
    this.seen.push(job.data.id);
  }
}

@Processor('prices') // request/reply: the job's return value, awaited through the queue's events
export class Prices extends WorkerHost {
  async process(job: Job<{ sku: string }>) {
    return { sku: job.data.sku, price: 42 };
  }
}

@Injectable()
export class Checkout implements OnModuleDestroy {
  private readonly priceEvents = new QueueEvents('prices', { connection });

  constructor(
    @InjectQueue('billing') private readonly billing: Queue,
    @InjectQueue('audit') private readonly audit: Queue,
    @InjectQueue('prices') private readonly prices: Queue,
  ) {}

  async place(order: Order) {
    await Promise.all([this.billing.add('order', order), this.audit.add('order', order)]);
    const job = await this.prices.add('price', { sku: order.id });
    return job.waitUntilFinished(this.priceEvents, 5000);
  }

  onModuleDestroy() {
    return this.priceEvents.close();
  }
}

@Module({
  imports: [BullModule.forRoot({ connection }), BullModule.registerQueue({ name: 'billing' }, { name: 'audit' }, { name: 'prices' })],
  providers: [Billing, Audit, Prices, Checkout],
})
export class AppModule {}

export async function bootstrap() {
  const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error', 'warn'] });
  return app;
}
