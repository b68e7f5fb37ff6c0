import Foundation

/// A pull source of bytes: each call returns the next chunk, or `nil` at the end.
package typealias ChunkSource = () throws -> [UInt8]?

/// Ready-made ``ChunkSource``s for files and gzip streams.
package enum ChunkSources {
    /// The size of the chunks read from files.
    package static let chunkSize = 64 * 1024

    /// Reads the file at `path` in chunks.
    package static func file(at path: String) throws -> ChunkSource {
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw FileError(path: path, reason: FileManager.default.fileExists(atPath: path) ? "cannot be read" : "does not exist")
        }
        return {
            guard let data = try handle.read(upToCount: chunkSize), !data.isEmpty else {
                try? handle.close()
                return nil
            }
            return [UInt8](data)
        }
    }

    /// Reads standard input in chunks.
    package static func standardInput() -> ChunkSource {
        let handle = FileHandle.standardInput
        return {
            guard let data = try handle.read(upToCount: chunkSize), !data.isEmpty else { return nil }
            return [UInt8](data)
        }
    }

    /// Decompresses the gzip bytes of `source`; throws ``GzipError/truncated`` if it ends early.
    package static func gunzip(_ source: @escaping ChunkSource) throws -> ChunkSource {
        let decompressor = try GzipDecompressor()
        var finished = false
        return {
            while !finished {
                guard let chunk = try source() else {
                    finished = true
                    try decompressor.finish()
                    return nil
                }
                let out = try decompressor.decompress(chunk)
                if !out.isEmpty { return out }
            }
            return nil
        }
    }

    /// A source over one in-memory buffer.
    package static func bytes(_ bytes: [UInt8]) -> ChunkSource {
        var pending: [UInt8]? = bytes
        return {
            defer { pending = nil }
            return pending
        }
    }
}

/// A file that could not be opened, read or written.
package struct FileError: Error, Equatable, Sendable, CustomStringConvertible {
    package var path: String
    package var reason: String
    package init(path: String, reason: String) {
        self.path = path
        self.reason = reason
    }
    package var description: String { "\(path): \(reason)" }
}
