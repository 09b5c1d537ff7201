import {
  assertCodec,
  jsonCodec,
  msgpackCodec,
  type OutgoingMessage,
  type PayloadCodec,
  type SendResult,
  StreamNotFoundError,
  StreamProducer,
} from '@redis-stream-coordinator/core';
import type { CoordinatorConnection } from './coordinator-connection';
import type { PublisherCodec } from './coordinator-module-options';

export type { PublisherCodec };

/** Options of one `publish` / `publishBatch` call. */
export interface PublishOptions {
  /** The codec of this call's entries; default the module's `publisher.codec`, else JSON. */
  codec?: PublisherCodec;
}

const CODECS_BY_NAME: Record<'json' | 'msgpack', PayloadCodec> = { json: jsonCodec, msgpack: msgpackCodec };

/**
 * What a publisher's caller can do about a missing stream. The producer underneath would say "give
 * the StreamProducer shardCount", an option a publish call does not have.
 */
const CREATE_THE_STREAM =
  "create it with CoordinatorAdmin.createStream (injectable), or give a @StreamListener of the stream (or the module's defaults) shardCount: its members create it when they join";

/** Rethrows a missing stream in the publisher's own words; any other error as it is. */
function publishing(call: string): (error: unknown) => never {
  return (error) => {
    if (error instanceof StreamNotFoundError)
      throw new StreamNotFoundError(error.streamPrefix, `${call}, nothing written`, CREATE_THE_STREAM);
    throw error;
  };
}

/** A `PublisherCodec` as the codec it names, checked; `field` names the option in the error. */
export function resolvePublisherCodec(codec: PublisherCodec | undefined, field: string): PayloadCodec {
  if (codec === undefined) return jsonCodec;
  if (typeof codec !== 'string') return assertCodec(codec, field);
  if (!Object.hasOwn(CODECS_BY_NAME, codec))
    throw new RangeError(`${field} must be 'json', 'msgpack' or a codec object, got ${JSON.stringify(codec)}`);
  return CODECS_BY_NAME[codec as 'json' | 'msgpack'];
}

/**
 * Publishes to any stream of its module's Redis (a StreamProducer per stream prefix and codec). The
 * unnamed module's is injected by class; a named module's with `@InjectStreamPublisher(name)`.
 * Entries are written with the module's `publisher.codec` (default JSON) or the call's `codec`; the
 * codec's name goes into each entry, so members decode it whatever their own default.
 *
 * @example
 * constructor(private readonly publisher: StreamPublisher) {}
 * await this.publisher.publish('summary', { key: userId, payload: summary });
 * await this.publisher.publish('thumbnails', { key: imageId, payload: { bytes } }, { codec: 'msgpack' });
 */
export class StreamPublisher {
  /** Per stream prefix, a producer per codec name (a codec object given again under its name replaces the last one's producer). */
  private readonly producers = new Map<string, Map<string, StreamProducer>>();
  private readonly defaultCodec: PayloadCodec;

  constructor(private readonly connection: CoordinatorConnection) {
    // Checked here, so that a bad default fails the startup rather than the first publish.
    this.defaultCodec = resolvePublisherCodec(connection.options.publisher?.codec, 'CoordinatorModule: publisher.codec');
  }

  /**
   * Writes one entry; a bad `codec` rejects, naming it. A stream that does not exist rejects with
   * `StreamNotFoundError`, nothing written: the publisher never creates streams (a listener given
   * `shardCount`, or `CoordinatorAdmin.createStream`, does).
   */
  async publish<T>(streamPrefix: string, message: OutgoingMessage<T>, options?: PublishOptions): Promise<SendResult> {
    return this.producer(streamPrefix, this.codecOf(options)).send(message).catch(publishing('StreamPublisher.publish'));
  }

  /** Writes entries in order (`StreamProducer.sendBatch`: a PartialBatchError says which landed); a bad `codec` rejects, naming it. */
  async publishBatch<T>(
    streamPrefix: string,
    messages: OutgoingMessage<T>[],
    options?: PublishOptions,
  ): ReturnType<StreamProducer['sendBatch']> {
    return this.producer(streamPrefix, this.codecOf(options)).sendBatch(messages).catch(publishing('StreamPublisher.publishBatch'));
  }

  private codecOf(options: PublishOptions | undefined): PayloadCodec {
    return options?.codec === undefined ? this.defaultCodec : resolvePublisherCodec(options.codec, 'StreamPublisher: codec');
  }

  private producer(streamPrefix: string, codec: PayloadCodec): StreamProducer {
    let byCodec = this.producers.get(streamPrefix);
    if (!byCodec) {
      byCodec = new Map();
      this.producers.set(streamPrefix, byCodec);
    }
    let producer = byCodec.get(codec.name);
    if (producer?.codec !== codec) {
      producer = new StreamProducer(this.connection.client, {
        streamPrefix,
        keyPrefix: this.connection.options.coordinator?.keyPrefix,
        codec,
      });
      byCodec.set(codec.name, producer);
    }
    return producer;
  }
}
