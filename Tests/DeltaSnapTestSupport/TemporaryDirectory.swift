import Foundation

/// A fresh directory under the system temporary directory, removed by ``remove()``.
package struct TemporaryDirectory: Sendable {
    package let path: String

    package init(_ label: String = "deltasnap") throws {
        path = (NSTemporaryDirectory() as NSString).appendingPathComponent("\(label)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    /// `path/name`.
    package func file(_ name: String) -> String {
        (path as NSString).appendingPathComponent(name)
    }

    package func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }

    /// Writes `text` to `path/name` and returns the full path.
    @discardableResult
    package func write(_ name: String, _ text: String) throws -> String {
        let target = file(name)
        try Data(text.utf8).write(to: URL(fileURLWithPath: target))
        return target
    }

    /// Writes `bytes` to `path/name` and returns the full path.
    @discardableResult
    package func write(_ name: String, bytes: [UInt8]) throws -> String {
        let target = file(name)
        try Data(bytes).write(to: URL(fileURLWithPath: target))
        return target
    }
}
