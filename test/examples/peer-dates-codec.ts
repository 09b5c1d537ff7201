import type { PayloadCodec } from '@redis-stream-coordinator/nestjs';

const ISO_DATE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** JSON whose dates come back as Date objects: what a custom serializer/deserializer pair did before. */
export const datesCodec: PayloadCodec = {
  name: 'json-dates', // stored in each entry, so a member decodes it with this codec whatever its default
  encode: (payload) => JSON.stringify(payload),
  decode: (raw) => JSON.parse(raw, (_key, value) => (typeof value === 'string' && ISO_DATE.test(value) ? new Date(value) : value)),
};
