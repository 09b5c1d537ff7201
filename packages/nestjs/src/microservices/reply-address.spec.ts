import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { replyAddressRefusal } from './reply-address';
import { inboxKey } from './reply-protocol';

describe('a reply goes only to an inbox of this transport under this key prefix (SPEC 10.4)', () => {
  const id = randomUUID();
  it('an inbox of a client of this prefix, with a UUID correlation id, is accepted', () => {
    expect(replyAddressRefusal('rsc', inboxKey('rsc', randomUUID()), id)).toBeUndefined();
  });
  it.each([
    ["another stream's shard", 'rsc:shard:{orders:0}'],
    ['a coordinator key', 'rsc:{orders}:meta'],
    ["another prefix's inbox", inboxKey('other', randomUUID())],
    ['a prefix of ours as a suffix', `x${inboxKey('rsc', randomUUID())}`],
    ['an inbox with a client id that is not a UUID', inboxKey('rsc', 'gone-client')],
    ['an inbox with more after it', `${inboxKey('rsc', randomUUID())}:x`],
    ['an empty header', ''],
  ])('%s is refused', (_, replyTo) => {
    expect(replyAddressRefusal('rsc', replyTo, id)).toMatch(/is not a reply inbox of this transport \(rsc:inbox:\{<client uuid>\}\)/);
  });
  it('a correlation id that is missing or not a UUID is refused; a long header is quoted cut', () => {
    const inbox = inboxKey('rsc', randomUUID());
    expect(replyAddressRefusal('rsc', inbox, undefined)).toMatch(/rsc-correlation-id is missing/);
    expect(replyAddressRefusal('rsc', inbox, 'c-1')).toMatch(/"c-1" is not a UUID/);
    expect(replyAddressRefusal('rsc', 'k'.repeat(10_000), id)!.length).toBeLessThan(400);
  });
  it('a key prefix with regex characters is matched literally', () => {
    const client = randomUUID();
    expect(replyAddressRefusal('a.b', inboxKey('a.b', client), id)).toBeUndefined();
    expect(replyAddressRefusal('a.b', inboxKey('axb', client), id)).toBeDefined();
  });
});
