/** Test helpers for users of the library and for its own tests: `@redis-stream-coordinator/core/testing`. */
export { RedisServer, type RedisServerOptions, type Persistence } from './redis-server';
export { ProtocolMember, settle } from './protocol-member';
