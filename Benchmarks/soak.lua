-- wrk script for Benchmarks/soak.sh: a bounded mix of polls over one collection.
--   ~80 % conditional polls with the newest ETag this thread has seen (304, or a delta
--   once a write lands), ~15 % polls from an old ETag (a delta that grows as writes go
--   on), ~5 % first starts (a full gzip body). Each thread stops after its share of
--   SOAK_REQUESTS; done() prints one line per status class for soak.sh to check.
local threads = {}
local path = os.getenv("SOAK_PATH")
local old_etag = os.getenv("SOAK_OLD_ETAG")
local first_etag = os.getenv("SOAK_ETAG")
local total = tonumber(os.getenv("SOAK_REQUESTS"))
local thread_count = tonumber(os.getenv("SOAK_THREADS"))
-- wrk's main thread sleeps for the whole -d duration even when every thread has stopped:
-- each thread appends a line here when its share is done, and soak.sh then sends SIGINT.
local done_file = os.getenv("SOAK_DONE_FILE")

function setup(thread)
    thread:set("id", #threads)
    table.insert(threads, thread)
end

function init(args)
    limit = math.floor(total / thread_count)
    sent, answered, ok, not_modified, other = 0, 0, 0, 0, 0
    etag = first_etag
    math.randomseed(id * 7919 + 1)
end

function request()
    sent = sent + 1
    local pick = math.random(100)
    local headers = { ["Accept-Encoding"] = "gzip" }
    if pick <= 80 then
        headers["If-None-Match"] = etag
    elseif pick <= 95 then
        headers["If-None-Match"] = old_etag
    end
    return wrk.format("GET", path, headers)
end

function response(status, headers, body)
    answered = answered + 1
    if status == 200 then
        ok = ok + 1
        local tag = headers["ETag"] or headers["etag"]
        if tag then etag = tag end
    elseif status == 304 then
        not_modified = not_modified + 1
    else
        other = other + 1
    end
    if answered == limit then
        local f = io.open(done_file, "a")
        f:write("done\n")
        f:close()
        wrk.thread:stop()
    end
end

function done(summary, latency, requests)
    local a, o, n, x = 0, 0, 0, 0
    for _, t in ipairs(threads) do
        a = a + t:get("answered"); o = o + t:get("ok"); n = n + t:get("not_modified"); x = x + t:get("other")
    end
    io.write(string.format("soak-counts answered=%d ok=%d not_modified=%d other=%d\n", a, o, n, x))
end
