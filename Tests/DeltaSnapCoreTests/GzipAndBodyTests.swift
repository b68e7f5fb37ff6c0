import DeltaSnapCore
import Testing

@Suite struct GzipTests {
    let text = Array(String(repeating: "DeltaSnap compresses records. Ünïcödé. ", count: 2000).utf8)

    @Test func roundTripsAndWritesADeterministicHeader() throws {
        let compressed = GzipCompressor.compress(text)
        #expect(Array(compressed.prefix(10)) == [0x1F, 0x8B, 0x08, 0x00, 0, 0, 0, 0, 0x00, 0xFF])
        #expect(compressed == GzipCompressor.compress(text))
        #expect(try GzipDecompressor.decompress(compressed) == text)
    }

    @Test func decompressesInSmallChunks() throws {
        let compressed = GzipCompressor.compress(text)
        let decompressor = try GzipDecompressor()
        var out: [UInt8] = []
        for start in stride(from: 0, to: compressed.count, by: 7) {
            try decompressor.decompress(Array(compressed[start..<min(start + 7, compressed.count)]), into: &out)
        }
        try decompressor.finish()
        #expect(out == text)
    }

    @Test func detectsTruncation() {
        let compressed = GzipCompressor.compress(text)
        for cut in [compressed.count - 1, compressed.count - 8, compressed.count / 2, 11] {
            #expect(throws: GzipError.truncated) { try GzipDecompressor.decompress(Array(compressed.prefix(cut))) }
        }
    }

    @Test func detectsFlippedBits() {
        let compressed = GzipCompressor.compress(text)
        var detected = 0
        for position in stride(from: 10, to: compressed.count, by: max(1, compressed.count / 40)) {
            var corrupt = compressed
            corrupt[position] ^= 0x10
            do {
                let out = try GzipDecompressor.decompress(corrupt)
                if out != text { detected += 1 }  // cannot happen: the CRC-32 would not match
            } catch {
                detected += 1
            }
        }
        #expect(detected == Array(stride(from: 10, to: compressed.count, by: max(1, compressed.count / 40))).count)
    }

    @Test func rejectsTrailingData() {
        #expect(throws: GzipError.trailingData) { try GzipDecompressor.decompress(GzipCompressor.compress(text) + [1, 2, 3]) }
    }
}

@Suite struct BodyFormatTests {
    func body(records: [Record], kind: BodyKind = .full, count: Int? = nil) -> [UInt8] {
        var checksum = StateChecksum.empty
        records.filter { !$0.isHidden }.forEach { checksum.add($0) }
        var encoder = BodyEncoder(header: BodyHeader(
            collection: "c", kind: kind, base: kind == .delta ? "e.1" : nil, token: "e.2",
            lastModified: "Sun, 06 Nov 1994 08:49:37 GMT", checksum: checksum, count: count ?? records.count))
        var out = encoder.start()
        for record in records { encoder.append(record, into: &out) }
        if count == nil { encoder.finish(into: &out) } else { out.append(contentsOf: Array("\n]}\n".utf8)) }
        return out
    }

    func records(_ n: Int) throws -> [Record] {
        try (0..<n).map { try Record(json: Array(#"{"id":"r\#(String(format: "%03d", $0))","v":"é\#($0)"}"#.utf8)) }
    }

    @Test func roundTripsHeaderAndRecords() throws {
        let input = try records(20) + [Record.tombstone(id: "gone")]
        let reader = BodyReader(bytes: body(records: input, kind: .delta))
        let header = try reader.readHeader()
        #expect(header.kind == .delta && header.base == "e.1" && header.token == "e.2" && header.count == 21)
        var output: [Record] = []
        while let record = try reader.nextRecord() { output.append(record) }
        #expect(output == input)
    }

    @Test func emptyBodyRoundTrips() throws {
        let bytes = body(records: [])
        #expect(String(decoding: bytes, as: UTF8.self).hasSuffix(#""count":0,"records":[]}"# + "\n"))
        let header = try Snapshot.verifyFull(BodyReader(bytes: bytes))
        #expect(header.count == 0)
    }

    @Test func snapshotVerificationCatchesCountAndChecksumLies() throws {
        let good = try records(5)
        #expect(throws: BodyError.countMismatch(announced: 6, found: 5)) {
            try Snapshot.verifyFull(BodyReader(bytes: body(records: good, count: 6)))
        }
        var tampered = body(records: good)
        let text = String(decoding: tampered, as: UTF8.self).replacingOccurrences(of: "é3", with: "é4")
        tampered = Array(text.utf8)
        #expect(throws: BodyError.self) { try Snapshot.verifyFull(BodyReader(bytes: tampered)) }
        #expect(throws: BodyError.self) { try Snapshot.verifyFull(BodyReader(bytes: body(records: good.reversed()))) }
    }

    @Test func truncatedBodyIsAnError() throws {
        let bytes = body(records: try records(5))
        let reader = BodyReader(bytes: Array(bytes.prefix(bytes.count - 10)))
        _ = try reader.readHeader()
        #expect(throws: BodyError.self) { while try reader.nextRecord() != nil {} }
    }

    @Test func headerMustPrecedeRecords() {
        let bytes = Array(#"{"records":[],"format":1}"#.utf8)
        #expect(throws: BodyError.missingField("format")) { try BodyReader(bytes: bytes).readHeader() }
    }
}
