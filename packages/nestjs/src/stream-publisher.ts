import { Inject, Injectable } from '@nestjs/common';
import { type OutgoingMessage, type SendResult, StreamProducer } from '@redis-stream-coordinator/core';
import { COORDINATOR_CONNECTION } from './coordinator.constants';
import { COORDINATOR_MODULE_OPTIONS } from './coordinator.module-definition';
import type { CoordinatorConnection } from './coordinator-connection';
import type { CoordinatorModuleOptions } from './coordinator-module-options';

/**
 * Publishes to any stream of the module's Redis (a StreamProducer per stream prefix).
 *
 * @example
 * constructor(private readonly publisher: StreamPublisher) {}
 * await this.publisher.publish('summary', { key: userId, payload: summary });
 */
@Injectable()
export class StreamPublisher {
  private readonly producers = new Map<string, StreamProducer>();

  constructor(
    @Inject(COORDINATOR_CONNECTION) private readonly connection: CoordinatorConnection,
    @Inject(COORDINATOR_MODULE_OPTIONS) private readonly options: CoordinatorModuleOptions,
  ) {}

  publish<T>(streamPrefix: string, message: OutgoingMessage<T>): Promise<SendResult> {
    return this.producer(streamPrefix).send(message);
  }

  publishBatch<T>(streamPrefix: string, messages: OutgoingMessage<T>[]): Promise<SendResult[]> {
    return this.producer(streamPrefix).sendBatch(messages);
  }

  private producer(streamPrefix: string): StreamProducer {
    let producer = this.producers.get(streamPrefix);
    if (!producer) {
      producer = new StreamProducer(this.connection.client, { streamPrefix, keyPrefix: this.options.coordinator?.keyPrefix });
      this.producers.set(streamPrefix, producer);
    }
    return producer;
  }
}
