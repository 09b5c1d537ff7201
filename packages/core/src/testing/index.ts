/** Test helpers for users of the library and for its own tests: `@redis-stream-coordinator/core/testing`. */
export { RedisServer, type RedisServerOptions, type Persistence } from './redis-server';
export { ProtocolMember, settle } from './protocol-member';
export { RedisCluster, type RedisClusterOptions, type ClusterNodeInfo, parseClusterNodes } from './redis-cluster';
export { RedisSentinel, type RedisSentinelOptions } from './redis-sentinel';
