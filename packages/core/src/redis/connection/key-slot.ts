/**
 * The Redis Cluster hash slot of a key (CRC16-XMODEM of the key, or of its hash tag `{...}` when
 * it has a non-empty one, modulo 16384), as the cluster specification defines it. Used to group
 * commands by the node serving their slot (execByNode).
 */
export function keySlot(key: string): number {
  let start = key.indexOf('{');
  let end = key.length;
  if (start >= 0) {
    const close = key.indexOf('}', start + 1);
    if (close > start + 1) end = close;
    else start = -1;
  }
  const bytes = Buffer.from(start >= 0 ? key.slice(start + 1, end) : key, 'utf8');
  let crc = 0;
  for (const byte of bytes) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}
