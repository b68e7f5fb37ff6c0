/// Collects NDJSON lines and hands them on in chunks of about 64 KiB, so writing a million
/// records costs a few hundred writes, not a million.
///
/// ```swift
/// var writer = NDJSONWriter { chunk in FileHandle.standardOutput.write(Data(chunk)) }
/// try writer.append(line: record.bytes)
/// try writer.flush()
/// ```
package struct NDJSONWriter {
    package static let chunkSize = 64 * 1024
    private var chunk: [UInt8] = []
    private let write: ([UInt8]) throws -> Void

    package init(write: @escaping ([UInt8]) throws -> Void) {
        self.write = write
        chunk.reserveCapacity(Self.chunkSize + 4096)
    }

    /// Appends `bytes` and a newline.
    package mutating func append(line bytes: some Collection<UInt8>) throws {
        chunk.append(contentsOf: bytes)
        chunk.append(UInt8(ascii: "\n"))
        if chunk.count >= Self.chunkSize { try flush() }
    }

    /// Hands on what is buffered.
    package mutating func flush() throws {
        guard !chunk.isEmpty else { return }
        try write(chunk)
        chunk.removeAll(keepingCapacity: true)
    }
}
