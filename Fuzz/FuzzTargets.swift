// libFuzzer targets for every parser a client or server feeds untrusted bytes to.
//
// Built by Fuzz/build.sh as one module together with DeltaSnapCore's sources (so the
// internal canonical-record scanner is reachable) and the server's ConditionalRequest. A
// SwiftPM executable cannot link with `-sanitize=fuzzer` (libFuzzer brings its own `main`),
// hence the plain swiftc build. The target is chosen with DELTASNAP_FUZZ_TARGET; each one
// asserts the parser's invariants, not just "no crash".

import Foundation

/// Fails the run (libFuzzer saves the input) when an invariant does not hold.
func require(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String) {
    if !condition() {
        FileHandle.standardError.write(Data("invariant broken: \(message())\n".utf8))
        abort()
    }
}

enum FuzzTarget: String, CaseIterable {
    case json, record, body, gzip, httpdate, conditional

    static let selected: FuzzTarget = {
        let name = ProcessInfo.processInfo.environment["DELTASNAP_FUZZ_TARGET"] ?? ""
        guard let target = FuzzTarget(rawValue: name) else {
            FileHandle.standardError.write(Data("set DELTASNAP_FUZZ_TARGET to one of: \(allCases.map(\.rawValue).joined(separator: ", "))\n".utf8))
            exit(2)
        }
        return target
    }()

    func run(_ bytes: [UInt8]) {
        switch self {
        case .json: fuzzJSON(bytes)
        case .record: fuzzRecord(bytes)
        case .body: fuzzBody(bytes)
        case .gzip: fuzzGzip(bytes)
        case .httpdate: fuzzHTTPDate(bytes)
        case .conditional: fuzzConditional(bytes)
        }
    }
}

/// A JSON value that parses writes canonical bytes that parse back to the same value.
func fuzzJSON(_ bytes: [UInt8]) {
    guard let value = try? JSONReader(bytes: bytes).readValue() else { return }
    let canonical = CanonicalJSON.bytes(value)
    guard let again = try? JSONReader(bytes: canonical).readValue() else {
        return require(false, "canonical bytes do not parse: \(String(decoding: canonical, as: UTF8.self))")
    }
    require(again == value, "canonical bytes parse to another value")
    require(CanonicalJSON.bytes(again) == canonical, "canonical bytes are not a fixed point")
}

/// The scanner's fast path and the full parser agree: bytes the scanner accepts are
/// canonical, and any record's canonical bytes re-read to the same record.
func fuzzRecord(_ bytes: [UInt8]) {
    if let scanned = bytes.withUnsafeBytes(CanonicalRecordScanner.scan) {
        require(scanned.bytes == bytes, "the scanner changed the bytes it accepted")
        let parsed = try? Record(parsing: JSONReader(bytes: bytes).readValue())
        require(parsed == scanned, "the scanner accepted bytes the parser reads otherwise")
    }
    guard let record = try? Record.parse(bytes) else { return }
    require((try? Record.parse(record.bytes)) == record, "a record's canonical bytes do not re-read to it")
}

/// A body either reads to its end or throws; it never crashes, and counts what it read.
func fuzzBody(_ bytes: [UInt8]) {
    let reader = BodyReader(bytes: bytes)
    guard (try? reader.readHeader()) != nil else { return }
    var records = 0
    while true {
        guard let next = try? reader.nextRecord() else { return }
        guard next != nil else { break }
        records += 1
        require(records <= bytes.count, "more records than bytes")
    }
    require(reader.recordsRead == records, "recordsRead disagrees with the records returned")
}

/// Arbitrary input either inflates or throws; anything compressed inflates back to itself.
func fuzzGzip(_ bytes: [UInt8]) {
    _ = try? GzipDecompressor.decompress(bytes)
    let compressed = GzipCompressor.compress(bytes, level: 1)
    require((try? GzipDecompressor.decompress(compressed)) == bytes, "gzip round trip lost bytes")
}

/// A date that parses formats back to a date that parses to the same second.
func fuzzHTTPDate(_ bytes: [UInt8]) {
    let text = String(decoding: bytes, as: UTF8.self)
    guard let seconds = HTTPDate.parse(text) else { return }
    let formatted = HTTPDate.format(seconds)
    require(HTTPDate.parse(formatted) == seconds, "\(text) → \(seconds) → \(formatted) does not round-trip")
}

/// Validators never crash the decision; entity tags come back without quotes.
func fuzzConditional(_ bytes: [UInt8]) {
    let text = String(decoding: bytes, as: UTF8.self)
    let half = text.index(text.startIndex, offsetBy: text.count / 2)
    let request = ConditionalRequest(ifNoneMatch: String(text[..<half]), ifModifiedSince: String(text[half...]))
    if case .entityTags(let tags) = request {
        require(tags.allSatisfy { !$0.hasPrefix("\"") }, "a tag kept its quote: \(tags)")
    }
    _ = ConditionalRequest(ifNoneMatch: nil, ifModifiedSince: text)
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzTarget.selected.run(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}
