import { type OutgoingMessage, type SendResult, StreamProducer } from '@redis-stream-coordinator/core';
import type { CoordinatorConnection } from './coordinator-connection';

/**
 * Publishes to any stream of its module's Redis (a StreamProducer per stream prefix). The unnamed
 * module's is injected by class; a named module's with `@InjectStreamPublisher(name)`.
 *
 * @example
 * constructor(private readonly publisher: StreamPublisher) {}
 * await this.publisher.publish('summary', { key: userId, payload: summary });
 */
export class StreamPublisher {
  private readonly producers = new Map<string, StreamProducer>();

  constructor(private readonly connection: CoordinatorConnection) {}

  publish<T>(streamPrefix: string, message: OutgoingMessage<T>): Promise<SendResult> {
    return this.producer(streamPrefix).send(message);
  }

  publishBatch<T>(streamPrefix: string, messages: OutgoingMessage<T>[]): ReturnType<StreamProducer['sendBatch']> {
    return this.producer(streamPrefix).sendBatch(messages);
  }

  private producer(streamPrefix: string): StreamProducer {
    let producer = this.producers.get(streamPrefix);
    if (!producer) {
      producer = new StreamProducer(this.connection.client, { streamPrefix, keyPrefix: this.connection.options.coordinator?.keyPrefix });
      this.producers.set(streamPrefix, producer);
    }
    return producer;
  }
}
