/**
 * `@redis-stream-coordinator/nestjs/microservices`: the `@nestjs/microservices` transport. A subpath
 * of its own because `@nestjs/microservices` is an optional peer dependency: the main entry never
 * loads it, this one needs it.
 */
export {
  getRedisStreamsTransportId,
  RedisStreamsServer,
  REDIS_STREAMS_TRANSPORT,
  type RedisStreamsServerStats,
} from './redis-streams.server';
export type {
  RedisStreamsPatternOptions,
  RedisStreamsServerConnectionOptions,
  RedisStreamsServerOptions,
} from './redis-streams-server.options';
export {
  getRedisStreamsServerToken,
  RedisStreamsServerModule,
  type RedisStreamsServerModuleAsyncOptions,
  type RedisStreamsServerModuleOptions,
} from './redis-streams-server.module';
export {
  type CoordinatorClientAsyncRegistration,
  type CoordinatorClientRegistration,
  CoordinatorClientsModule,
} from './coordinator-clients.module';
export { RedisStreamsContext } from './redis-streams.context';
export {
  type CoordinatorClientConnectionOptions,
  CoordinatorClientProxy,
  type CoordinatorClientProxyOptions,
  RequestTimeoutError,
} from './coordinator-client.proxy';
export { StreamRecord, type StreamRecordOptions } from './stream-record';
export { CORRELATION_ID_HEADER, REPLY_DEADLINE_HEADER, REPLY_TO_HEADER, inboxKey } from './reply-protocol';
