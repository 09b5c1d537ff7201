/** Metadata key of @StreamListener (one namespace for everything this package stores). */
export const STREAM_LISTENER_METADATA = 'redis-stream-coordinator:stream-listener';
/** Injection token of the module's Redis connection (a CoordinatorConnection). */
export const COORDINATOR_CONNECTION = 'REDIS_STREAM_COORDINATOR_CONNECTION';
