/**
 * `@redis-stream-coordinator/nestjs/microservices`: the `@nestjs/microservices` transport. A subpath
 * of its own because `@nestjs/microservices` is an optional peer dependency: the main entry never
 * loads it, this one needs it.
 */
export { RedisStreamsServer, REDIS_STREAMS_TRANSPORT, type RedisStreamsServerStats } from './redis-streams.server';
export type { RedisStreamsPatternOptions, RedisStreamsServerOptions } from './redis-streams-server.options';
export { RedisStreamsContext } from './redis-streams.context';
export { CoordinatorClientProxy, RequestTimeoutError, type CoordinatorClientProxyOptions } from './coordinator-client.proxy';
export { StreamRecord, type StreamRecordOptions } from './stream-record';
export { CORRELATION_ID_HEADER, REPLY_DEADLINE_HEADER, REPLY_TO_HEADER, inboxKey } from './reply-protocol';
