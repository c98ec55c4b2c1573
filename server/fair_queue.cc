// FairQueue: waiting MeasureRequests by DeviceKey, round-robin over jobs.
#include "server/fair_queue.h"

#include <algorithm>

#include "compiler/support/status.h"

namespace tuneforge {

void FairQueue::Push(const std::string& request_id, const std::string& device_key,
                     const std::string& job, int weight, bool front) {
  TF_CHECK(weight >= 1);
  TF_CHECK(where_.count(request_id) == 0, "request ", request_id, " queued twice");
  KeyQueue& key = keys_[device_key];
  auto [it, inserted] = key.jobs.try_emplace(job);
  JobQueue& q = it->second;
  if (inserted) q.order = next_order_++;
  if (q.ids.empty()) q.pass = std::max(q.pass, key.virtual_time);  // no credit for idling
  q.weight = weight;
  if (front) {
    q.ids.push_front(request_id);
  } else {
    q.ids.push_back(request_id);
  }
  where_[request_id] = {device_key, job};
}

std::optional<std::string> FairQueue::Pop(const std::string& device_key,
                                          const std::function<bool(const std::string&)>& eligible) {
  auto k = keys_.find(device_key);
  if (k == keys_.end()) return std::nullopt;
  KeyQueue& key = k->second;
  JobQueue* best = nullptr;
  std::deque<std::string>::iterator best_it;
  for (auto& [name, q] : key.jobs) {
    if (best && (q.pass > best->pass || (q.pass == best->pass && q.order > best->order))) continue;
    auto it = std::find_if(q.ids.begin(), q.ids.end(), eligible);
    if (it == q.ids.end()) continue;
    best = &q;
    best_it = it;
  }
  if (!best) return std::nullopt;
  std::string id = std::move(*best_it);
  best->ids.erase(best_it);
  key.virtual_time = std::max(key.virtual_time, best->pass);
  best->pass += 1.0 / best->weight;
  where_.erase(id);
  return id;
}

bool FairQueue::Remove(const std::string& request_id) {
  auto w = where_.find(request_id);
  if (w == where_.end()) return false;
  auto [key_name, job] = w->second;
  where_.erase(w);
  KeyQueue& key = keys_[key_name];
  JobQueue& q = key.jobs[job];
  q.ids.erase(std::remove(q.ids.begin(), q.ids.end(), request_id), q.ids.end());
  return true;
}

void FairQueue::ForgetJob(const std::string& job) {
  for (auto& [name, key] : keys_) {
    auto it = key.jobs.find(job);
    if (it == key.jobs.end()) continue;
    for (const std::string& id : it->second.ids) where_.erase(id);
    key.jobs.erase(it);
  }
}

std::vector<std::string> FairQueue::Queued(const std::string& device_key) const {
  std::vector<std::string> out;
  auto k = keys_.find(device_key);
  if (k == keys_.end()) return out;
  std::vector<const JobQueue*> jobs;
  for (const auto& [name, q] : k->second.jobs) jobs.push_back(&q);
  std::sort(jobs.begin(), jobs.end(),
            [](const JobQueue* a, const JobQueue* b) { return a->order < b->order; });
  for (const JobQueue* q : jobs) out.insert(out.end(), q->ids.begin(), q->ids.end());
  return out;
}

}  // namespace tuneforge
