/// HTTP dates in the IMF-fixdate form of RFC 9110 §5.6.7: `Sun, 06 Nov 1994 08:49:37 GMT`.
///
/// Hand-written: `DateFormatter` depends on locale and time-zone set-up and is slow on the
/// 304 path; this is a few lines of calendar arithmetic (days from the civil calendar).
package enum HTTPDate {
    private static let weekdays = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// Formats seconds since 1970-01-01T00:00:00Z.
    package static func format(_ seconds: Int64) -> String {
        let days = floorDivide(seconds, 86_400)
        let secondOfDay = seconds - days * 86_400
        let (year, month, day) = civil(fromDays: days)
        let weekday = weekdays[Int(((days % 7) + 7) % 7)]
        return "\(weekday), \(pad(day)) \(months[month - 1]) \(padYear(year)) \(pad(Int(secondOfDay / 3600))):\(pad(Int(secondOfDay / 60 % 60))):\(pad(Int(secondOfDay % 60))) GMT"
    }

    /// Parses an IMF-fixdate into seconds since 1970; `nil` for any other text
    /// (RFC 9110 says a recipient ignores an invalid `If-Modified-Since`).
    package static func parse(_ text: some StringProtocol) -> Int64? {
        let parts = text.split(separator: " ")
        guard parts.count == 6, parts[0].count == 4, parts[0].hasSuffix(","), parts[5] == "GMT",
              isDigits(parts[1], count: 2), let day = Int(parts[1]), (1...31).contains(day),
              let monthIndex = months.firstIndex(where: { $0 == parts[2] }),
              isDigits(parts[3], count: 4), let year = Int(parts[3])
        else { return nil }
        let clock = parts[4].split(separator: ":")
        guard clock.count == 3, clock.allSatisfy({ isDigits($0, count: 2) }),
              let hour = Int(clock[0]), let minute = Int(clock[1]), let second = Int(clock[2]),
              (0...23).contains(hour), (0...59).contains(minute), (0...60).contains(second)
        else { return nil }
        let days = daysFromCivil(year: year, month: monthIndex + 1, day: day)
        return days * 86_400 + Int64(hour * 3600 + minute * 60 + second)
    }

    private static func pad(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }

    /// Four digits, as the grammar wants (`0997`, found by the fuzzer: `997` did not re-parse).
    private static func padYear(_ year: Int) -> String {
        guard (0..<1000).contains(year) else { return "\(year)" }
        return String(repeating: "0", count: 4 - "\(year)".count) + "\(year)"
    }

    /// Exactly `count` ASCII digits (`Int("+1")` would accept a sign).
    private static func isDigits(_ text: some StringProtocol, count: Int) -> Bool {
        text.utf8.count == count && text.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
    }

    private static func floorDivide(_ a: Int64, _ b: Int64) -> Int64 {
        a >= 0 ? a / b : -((-a + b - 1) / b)
    }

    // Howard Hinnant's days_from_civil / civil_from_days.
    private static func daysFromCivil(year: Int, month: Int, day: Int) -> Int64 {
        let y = Int64(month <= 2 ? year - 1 : year)
        let era = floorDivide(y, 400)
        let yearOfEra = y - era * 400
        let m = Int64(month)
        let dayOfYear = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + Int64(day) - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    private static func civil(fromDays days: Int64) -> (year: Int, month: Int, day: Int) {
        let z = days + 719_468
        let era = floorDivide(z, 146_097)
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        return (Int(year), Int(month), Int(day))
    }
}
